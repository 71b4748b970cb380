from django.urls import path

from training import cycle_api

urlpatterns = [
    path("cycles", cycle_api.cycles, name="training-cycles"),
    path("cycles/<int:cycle_id>", cycle_api.cycle_detail, name="training-cycle"),
    path("training-runs", cycle_api.training_runs, name="training-runs"),
    path("admissions", cycle_api.admissions, name="training-admissions"),
]
