"""longca CP strategy: LoongTrain 2D attention (head parallel plus a double ring)."""
