"""Test helpers shared by the unit and end-to-end suites."""
