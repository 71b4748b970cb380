"""Changing the system: ``executor.Executor`` is the only holder of WriteToolsets; ``proposals`` checks a
proposed action against its tool's schema before anyone is asked to approve it."""
