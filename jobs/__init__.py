"""Background work: RQ jobs (the doorbell) and the database-driven sweeper."""
