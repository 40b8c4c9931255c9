"""Data protection (issue 39): the retention job (retention.py) and the privacy pack."""
