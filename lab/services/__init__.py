"""Small programs the local lab runs under supervisord (standard library only)."""
