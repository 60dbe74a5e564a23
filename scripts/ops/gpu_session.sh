#!/usr/bin/env bash
# One lent GPU session's calls, prepared on the CPU machine: the checks, then the at-scale grid (docs/BENCHMARKS.md).
#
# Here, once per session (the network reaches the package registries from this machine, never from the GPU one):
#     bash scripts/ops/gpu_session.sh download
# fills .whl/ (git-ignored through .git/info/exclude) with what the GPU image lacks: ta, gymnasium, stable-baselines3,
# sb3-contrib, optuna and its storage's packages, at the versions this project's .venv tests with.
#
# A session is lent 15 minutes of device time, its machine's start (a minute or two) included, and one call runs at
# most 10 minutes; a second call finds the machine warm only if made within 30 s of the first's end. So (as on
# 2026-11-26, which brought back 17 rows this way, and 2026-11-27 with stages, below: docs/BENCHMARKS.md), with
# carry [".whl"]:
#     FOLLOW=575 bash scripts/ops/gpu_session.sh start          # timeout_s 600
#     FOLLOW=260 bash scripts/ops/gpu_session.sh follow         # at once; timeout_s what the lease has left, less 20 s
# "start [STAGE...]" runs the check in the background, in a process session of its own, for DEADLINE seconds
# (default 760), each step at most STEP_CAP (default 300), and copies its rows and logs to $OUT every 5 s for FOLLOW
# seconds; "follow", made at once on the still-warm machine, brings back the rest (a machine given back meanwhile
# has lost it). A stage is a part or parts joined by commas, which then run side by side (the GPU has room for
# more than one at a time): "start sb3 checks,scale,update" timed sb3-contrib's comparison alone (241 s), then ran
# the rest side by side, all in 506 s. Give a timing quoted as a ratio a stage of its own.
# "check [PART...]" runs scripts/ops/gpu_check.py (its docstring lists the parts and their order) within DEADLINE
# seconds (default 530: with the install and the final table the call ends inside its 600 s), streaming each row to
# $OUT/rows.jsonl as its step ends (a call killed from outside still brings back every row measured before), and
# leaves the whole log and its JSON line under $OUT. Then give the machine back, copy $OUT/rows.jsonl into
# docs/data/gpu_runs/ and put the figures in docs/BENCHMARKS.md's table of that device.
#     bash scripts/ops/gpu_session.sh grid sp500 3 8 --steps 5000000 --seeds 10 --set train.num_envs=512 \
#         --set ppo.update_epochs=1 --set train.eval_every=6   # fewer gradient steps: docs/RESULTS.md
# (carry also ".gpu_state"). The grid is for a session lent more time than the checks need: 15 minutes hold a few
# of its cells at most. "grid DATA FOLDS MINUTES [reproduce_paper options]" runs reproduce_paper.py's grid for
# MINUTES through the SQLite study in .gpu_state/DATA.db, with WORKERS processes (default 4) sharing the GPU; then it
# kills the workers and copies the study to $OUT (the next call queues the cells they were cut off in again). Copy
# it back into .gpu_state/ before the next call. The call in which the grid finishes also leaves the grid's CSV
# (one row per run and benchmark walk, whose machine column names the GPU) under $OUT, for docs/data/grids/.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Pure Python, any interpreter (ta is published as a source archive only, so pip builds its wheel here) ...
WHEELS=(ta==0.11.0 gymnasium==1.4.0 farama-notifications==0.0.4 stable-baselines3==2.9.2 sb3-contrib==2.9.2
        optuna==5.0.0 alembic==1.20.1 colorlog==6.12.0 mako==1.4.3)
# ... and built for the GPU image's CPython 3.12 on x86-64.
BINARY_WHEELS=(sqlalchemy==2.1.9 arch==8.0.0)  # arch: evaluate's Sharpe-difference bootstrap

download() {
  mkdir -p .git/info
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  grep -qx '/.gpu_state/' .git/info/exclude || echo '/.gpu_state/' >> .git/info/exclude
  mkdir -p .whl .gpu_state
  python3 -m pip wheel --quiet --no-deps -w .whl "${WHEELS[@]}"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "${BINARY_WHEELS[@]}"
  ls .whl
}

prepare() {  # the device machine: carried wheels into /tmp/site, the source tree on the path, what is there
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD:$PWD/lab" PYTHONUNBUFFERED=1 WANDB_MODE=disabled  # the trainer and its lab
  nvidia-smi -L || true
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
  git log --oneline -1 2>/dev/null || true
}

# The check as both "check" and "start" run it (each adds its deadline, rows file and parts).
CHECK=(python3 scripts/ops/gpu_check.py --json --step-cap "${STEP_CAP:-300}")

follow() {  # copy the background check's rows and logs to $OUT every 5 s, for FOLLOW seconds or until it ends
  local end=$((SECONDS + ${FOLLOW:-575}))
  while [ $SECONDS -lt $end ] && pgrep -f "gpu_session.sh stages" > /dev/null; do
    cp /tmp/gpu/* "$OUT"/ 2>/dev/null || true
    sleep 5
  done
  cp /tmp/gpu/* "$OUT"/ 2>/dev/null || true
  [ -d /tmp/gpu ] || echo "no background check on this machine (it was given back?)"
  for log in /tmp/gpu/*.log; do [ -f "$log" ] && { echo "== $log"; tail -n 30 "$log"; }; done
}

case "${1:-}" in
  download)
    download ;;
  check)
    shift
    prepare
    name="gpu_check-$(IFS=-; echo "${*:-all}")"
    set -o pipefail
    "${CHECK[@]}" --deadline "${DEADLINE:-530}" --rows-out "$OUT/rows.jsonl" ${1:+--parts "$@"} 2>&1 \
      | tee "$OUT/$name.log"
    tail -n 1 "$OUT/$name.log" > "$OUT/$name.json" ;;
  start)
    # The check in the background, in a process session of its own, so that it runs on after this call ends while
    # the machine stays warm (30 s): "follow", called at once, brings back what it measures after that.
    shift
    prepare
    mkdir -p /tmp/gpu
    setsid nohup bash "$PWD/scripts/ops/gpu_session.sh" stages "$@" > /tmp/gpu-stages.log 2>&1 < /dev/null &
    follow ;;
  stages)
    # (start's background) Each argument is a stage, run in order; a stage's comma-separated parts run side by side,
    # one gpu_check each, with the rows and log of each in /tmp/gpu (at most 8 files come back from $OUT, so at
    # most 4 parts a session). No argument: every part, in gpu_check's order, in one process. Side by side suits
    # parts whose figures are pass/fail or memory; a timing that is quoted as a ratio wants a stage of its own.
    shift
    end=$((SECONDS + ${DEADLINE:-760}))
    for stage in "${@:-all}"; do
      left=$((end - SECONDS))
      [ "$left" -gt 20 ] || break
      for part in ${stage//,/ }; do
        parts=(--parts "$part")
        [ "$part" = all ] && parts=()
        "${CHECK[@]}" --deadline "$left" --rows-out "/tmp/gpu/rows-$part.jsonl" "${parts[@]}" \
          > "/tmp/gpu/gpu_check-$part.log" 2>&1 &
      done
      wait
    done ;;
  follow)
    follow ;;
  grid)
    data=$2 folds=$3 minutes=$4
    shift 4
    prepare
    mkdir -p .gpu_state
    storage="sqlite:///$PWD/.gpu_state/$data.db"
    # The last call's workers were killed with their machine: fail their cells now (the grid queues them again)
    # instead of waiting out the heartbeats' grace period.
    python3 - "$storage" "$data-at-scale" <<'PY'
import sys

import optuna
from optuna.trial import TrialState

url, name = sys.argv[1:]
storage = optuna.storages.RDBStorage(url)
try:
    study = optuna.load_study(storage=storage, study_name=name)
except KeyError:
    sys.exit(0)  # a new grid
study_id = storage.get_study_id_from_name(name)
for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
    storage.set_trial_state_values(storage.get_trial_id_from_study_id_trial_number(study_id, trial.number),
                                   TrialState.FAIL)
    print(f"cell of trial {trial.number} was cut off by the last call: queued again")
PY
    pids=()
    for w in $(seq 1 "${WORKERS:-4}"); do
      python3 scripts/studies/reproduce_paper.py --data "$data" --folds "$folds" --out "/tmp/runs-$w" \
        --grid "$data-at-scale" --grid-dir "/tmp/grids-$w" --storage "$storage" --study "$data-at-scale" "$@" \
        > "/tmp/worker-$w.log" 2>&1 &
      pids+=($!)
    done
    end=$((SECONDS + minutes * 60))  # until the time is up or every worker has ended (the grid is done)
    while [ $SECONDS -lt $end ] && pgrep -f scripts/studies/reproduce_paper.py > /dev/null; do sleep 5; done
    # SIGKILL, not SIGTERM: a trainer stopped gracefully would hand its short run on to be walked as if finished.
    pkill -KILL -f scripts/studies/reproduce_paper.py || true
    wait || true
    # Opening the study rolls back a transaction a killed worker left half-written (SQLite's journal), then copy.
    python3 -c "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA integrity_check').fetchone())" \
      ".gpu_state/$data.db"
    cp ".gpu_state/$data.db" "$OUT/"
    # Written once the grid is done, on this machine (its machine column names the GPU): the grid's CSV.
    if grep -q "^grid written to" /tmp/worker-1.log; then cp "/tmp/grids-1/$data-at-scale.csv" "$OUT/"; fi
    tail -n 20 /tmp/worker-1.log | tee "$OUT/worker-1.log" ;;
  *)
    echo "usage: bash scripts/ops/gpu_session.sh download | check [PART...] | start [STAGE...] | follow" \
      "| grid DATA FOLDS MINUTES [options]" >&2
    exit 2 ;;
esac
