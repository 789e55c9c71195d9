"""longca CP strategy plugin `mystrategy`."""
