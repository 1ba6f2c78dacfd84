"""What runs above one server: the master and its workers (`multiprocess`), the reloader
(`reload`), and the process chores they share (`process`: pid file, titles, privileges, RSS)."""
