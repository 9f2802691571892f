"""One adapter per library (``ADAPTER`` in each module); see ``base.Adapter``."""
