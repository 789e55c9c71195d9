"""longca mask plugin `mymask`."""
