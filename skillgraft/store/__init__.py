"""The store: the block store facade, its edits and integrity check, the catalogs (SQLite,
PostgreSQL), block storage (a folder, object storage) and the ledger."""
