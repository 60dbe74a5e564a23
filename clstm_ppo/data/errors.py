class DataError(ValueError):
    """Bad market data, phrased as one line: the file, the column or row, and the fix."""
