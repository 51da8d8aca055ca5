"""pytest in the case's interpreter: running it (session), reading its results (results), static
checks of a test file (static_checks), and the tests near a change (nearby)."""
