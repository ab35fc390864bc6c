"""The search driver, in four parts (imported from here for convenience):

- :mod:`~fusiontune.search.problem`: decision variables, decoding a trial into a plan;
- :mod:`~fusiontune.search.records`, :mod:`~fusiontune.search.store` and
  :mod:`~fusiontune.search.storage`: trial records, the study and its mirror, opening it;
- :mod:`~fusiontune.search.sampler_factory`: the Optuna sampler for a name;
- :mod:`~fusiontune.search.loop`: ask -> evaluate -> tell.
"""

from __future__ import annotations

from fusiontune.search.loop import best_record, make_record, run_trials
from fusiontune.search.problem import Problem, edge_param, hw_json
from fusiontune.search.records import RECORD_ATTR, TrialRecord, study_records
from fusiontune.search.sampler_factory import make_sampler
from fusiontune.search.storage import open_study, storage_for
from fusiontune.search.store import FLUSH_INTERVAL_S, StudyStore

__all__ = [
    "FLUSH_INTERVAL_S",
    "RECORD_ATTR",
    "Problem",
    "StudyStore",
    "TrialRecord",
    "best_record",
    "edge_param",
    "hw_json",
    "make_record",
    "make_sampler",
    "open_study",
    "run_trials",
    "storage_for",
    "study_records",
]
