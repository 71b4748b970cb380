from django.urls import path

from training import api, cycle_api

urlpatterns = [
    path("cycles", cycle_api.cycles, name="training-cycles"),
    path("cycles/<int:cycle_id>", cycle_api.cycle_detail, name="training-cycle"),
    path("training-runs", cycle_api.training_runs, name="training-runs"),
    path("admissions", cycle_api.admissions, name="training-admissions"),
    path(
        "evolver/trajectories/<int:trajectory_id>/mark-wrong",
        api.trajectory_mark_wrong_view,
        name="evolver-mark-wrong",
    ),
    path("evolver/skills/<int:skill_id>", api.skill_detail, name="evolver-skill"),
]
