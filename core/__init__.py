"""What every app shares and none owns: env helpers, the one service error, queue plumbing.

Imports none of the apps (design.md section 5; import-linter checks it in ``make lint``).
"""
