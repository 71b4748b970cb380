"""Student or teacher: the routing policies of a profile (``policies``), the learned router (``learning``:
features, model, calibration, evaluation) and its versions (``versions``: train, admit, roll back, drift)."""

__all__ = ["learning", "policies", "versions"]
