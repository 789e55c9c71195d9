"""Registration modules of built-in plugins whose work needs torch: they register without importing
it, so loading the registry (listings, `doctor`, pytest's plugin) stays light."""
