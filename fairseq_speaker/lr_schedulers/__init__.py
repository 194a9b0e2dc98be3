from .restart_from_best import RestartFromBestSchedule

__all__ = ["RestartFromBestSchedule"]
