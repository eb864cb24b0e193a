"""Queries, one module per aggregate. Plain functions taking the session first; the caller
owns the transaction."""
