"""The ledger audit: our payments compared with the acquirer's records (README, "Ledger audit")."""
