"""Settings split by environment: base (shared), local, test, production."""
