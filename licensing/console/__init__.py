"""The staff console: admin pages, review, usage, charts, the live feed's views, the management
API."""
