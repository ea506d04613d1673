"""The page's plumbing that is not layout: kept out of app.py so that it reads top to bottom."""
