"""The explorer's screens besides the main one."""
