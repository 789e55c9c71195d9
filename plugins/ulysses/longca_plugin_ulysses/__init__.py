"""longca CP strategy: Ulysses (all-to-all between sequence and head sharding)."""
