"""Where a study lives and how workers share it: a SQLite file by default (nothing to start), or any
SQLAlchemy URL (PostgreSQL, MySQL) so that processes on other machines join the same study. Each
worker runs trials until the study holds the number asked for, counted across every worker."""

from __future__ import annotations

import random
import re
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import optuna

from clstm_ppo.config import ConfigError, first_line

# a worker that dies (kill -9, a lost machine) leaves its trial RUNNING; heartbeats fail it
HEARTBEAT_S = 60
GRACE_S = 300


# Query keys that carry a secret in SQLAlchemy and libpq URLs (libpq also reads sslpassword).
SECRET_KEYS = ("password", "passwd", "pwd", "sslpassword")


def url_secrets(url: str) -> list[str]:
    """Every secret ``url`` holds: the ``user:password@`` part and any
    ``?password=``-like query value."""
    parts = urlsplit(url)
    found = [parts.password] if parts.password else []
    found += [
        value
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
        if key.lower() in SECRET_KEYS and value
    ]
    # the raw (still percent-encoded) forms too, as they stand in the
    # URL and in a driver's error text
    found += [raw for raw in (quote(s, safe="") for s in list(found)) if raw not in found]
    return sorted(set(found), key=len, reverse=True)


def scrubbed(text: str, url: str) -> str:
    """``text`` (a message, an error a driver raised about ``url``) with each of
    ``url``'s secrets as ***."""
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return text


def masked(url: str) -> str:
    """``url`` without its passwords (``user:pw@`` and ``?password=pw``), for
    messages and summaries."""
    if "://" not in url:
        # a libpq keyword string ("host=db password=pw"), or a typo: mask key=value forms
        return re.sub(rf"(?i)\b({'|'.join(SECRET_KEYS)})(\s*=\s*)('[^']*'|\S+)", r"\1\2***", url)
    if not url_secrets(url):
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:***@{host}"
    query = "&".join(
        f"{key}=***" if key.lower() in SECRET_KEYS else f"{key}={value}"
        for key, value in parse_qsl(parts.query, keep_blank_values=True)
    )
    return (
        f"{parts.scheme}://{netloc}{parts.path}"
        + (f"?{query}" if query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )


def storage_url(url: str | None, out: Path) -> str:
    """The SQLAlchemy URL: ``url``, or a SQLite file in the output folder."""
    if url:
        return url
    out.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(out / 'study.db').resolve()}"


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """The storage behind ``url``, tables made if new; an unreachable or
    malformed URL is one line."""
    import sqlalchemy.exc

    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if "://" not in url:
        raise ConfigError(
            f"--storage {masked(url)}: not a SQLAlchemy URL; write e.g. sqlite:///study.db or "
            "postgresql://user:password@host:5432/dbname"
        )
    # SQLite: wait for another worker's write instead of failing at once;
    # servers: give up on a dead host soon.
    connect = (
        {"timeout": 60}
        if scheme == "sqlite"
        else {"connect_timeout": 10}
        if scheme == "postgresql"
        else {}
    )
    # psycopg 3 (the dependency) whichever driver this SQLAlchemy version
    # takes a bare postgresql:// to mean
    driver_url = (
        "postgresql+psycopg://" + url.removeprefix("postgresql://")
        if url.startswith("postgresql://")
        else url
    )
    engine = {"connect_args": connect, "pool_pre_ping": True}
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    driver_url,
                    engine_kwargs=engine,
                    heartbeat_interval=HEARTBEAT_S,
                    grace_period=GRACE_S,
                )
        except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError, OSError) as err:
            # Workers started together on a new database race to create its tables: the loser's
            # CREATE fails ("already exists": ProgrammingError or IntegrityError on a server;
            # OperationalError on SQLite, which may also say "database is locked" while the winner
            # writes), and a second look finds them made.
            racing = isinstance(
                err, (sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.IntegrityError)
            ) or (
                isinstance(err, sqlalchemy.exc.OperationalError)
                and any(words in str(err) for words in ("already exists", "database is locked"))
            )
            if not racing or attempt == 4:
                # a driver's error may quote the URL, password and all
                why = scrubbed(first_line(err), url)
                raise ConfigError(
                    f"--storage {masked(url)}: cannot open it ({why}); check the URL, that the "
                    "server runs and accepts this user, and that its driver is installed"
                ) from None
            time.sleep(0.5 + random.random())
    raise AssertionError("unreachable")


def make_pruner(name: str, steps: int, first_mark: int) -> optuna.pruners.BasePruner:
    if name == "median":
        # a trial is judged only after a quarter of the budget, against
        # at least three finished trials
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=steps // 4)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=first_mark, max_resource=steps, reduction_factor=3
        )
    return optuna.pruners.NopPruner()


def open_study(
    storage: optuna.storages.RDBStorage,
    name: str,
    pruner: optuna.pruners.BasePruner,
    sampler_seed: int | None,
    setup: dict[str, Any],
) -> optuna.Study:
    """Create the study or join it; a worker whose settings differ from the study's is refused,
    since its trials would not be comparable with the others'."""
    # constant_liar: parallel workers see each other's running trials, so they
    # do not all draw the same point
    sampler = optuna.samplers.TPESampler(seed=sampler_seed, constant_liar=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(
            storage=storage,
            study_name=name,
            direction="maximize",
            sampler=sampler,
            pruner=pruner,
            load_if_exists=True,
        )
    known = study.user_attrs.get("setup")
    if known is None:
        study.set_user_attr("setup", setup)
    elif known != setup:
        diff = sorted(k for k in set(known) | set(setup) if known.get(k) != setup.get(k))
        raise ConfigError(
            f"study {name!r} was started with other settings ({', '.join(diff)}: "
            f"{', '.join(f'{k}={known.get(k)!r}' for k in diff)}); join it with the same "
            "--config, --data, --steps, --seeds, --space and --set, or name a new --study"
        )
    return study


def run_workers(
    study: optuna.Study,
    objective: Any,
    trials: int,
    n_jobs: int,
    catch: tuple[type, ...],
    callback: Any = None,
) -> int:
    """Run trials in ``n_jobs`` threads until the study holds ``trials`` (every worker's, every
    state); the number this process ran. Trials run as subprocesses, so threads are enough here."""
    ran = [0]
    lock = threading.Lock()

    def loop() -> None:
        # The count and the trial's creation are two transactions: two workers finishing at the same
        # instant can start one trial more than asked, never fewer, and never run one trial twice.
        while len(study.get_trials(deepcopy=False)) < trials:
            study.optimize(
                objective,
                n_trials=1,
                catch=catch,
                callbacks=[callback] if callback else None,
                gc_after_trial=False,
            )
            with lock:
                ran[0] += 1

    if n_jobs == 1:
        loop()  # in the main thread, where Ctrl-C lands
    else:
        with ThreadPoolExecutor(max_workers=n_jobs) as pool:
            for future in [pool.submit(loop) for _ in range(n_jobs)]:
                future.result()
    return ran[0]
