"""The gateway's view of a call (routing.router.policies.Call) gives the features of its replay record."""

from __future__ import annotations

import json

import numpy as np

from bench.router_data.synthetic import generate
from routing.models import TaskProfile
from routing.protocol import ChatRequest
from routing.router.learning.features import CallInput, Featurizer
from routing.router.policies import Call


def test_call_and_record_give_the_same_features(featurizer: Featurizer):
    for record in generate(40, regime="mixed", seed=9):
        body = {"model": "auto", **record.request}
        if not body["tools"]:
            del body["tools"]
        request = ChatRequest.model_validate(body)
        profile = TaskProfile(name=record.profile, skillbook_text="tips" if record.skillbook_matched else "")
        from_call = CallInput.from_call(Call(request, profile, record.has_verifier))
        from_record = CallInput.from_record(record)
        assert from_call.turn_index == from_record.turn_index
        assert np.allclose(featurizer.transform(from_call), featurizer.transform(from_record))
        # the gateway hands over its plan's dump of the request (one dump per call, not two): same input
        dumped = request.model_dump(exclude_none=True)
        from_dump = CallInput.from_call(Call(request, profile, record.has_verifier, dumped))
        assert (from_dump.messages, from_dump.tools) == (from_call.messages, from_call.tools)
        assert (featurizer.transform(from_dump) == featurizer.transform(from_call)).all()
        with_dump = Call(request, profile, record.has_verifier, dumped)
        assert with_dump.serialized() == Call(request, profile, record.has_verifier).serialized()
        tools = [t.model_dump(exclude_none=True) for t in request.tools or []]
        messages = [m.model_dump(exclude_none=True) for m in request.messages]
        assert json.loads(with_dump.serialized()) == {"messages": messages, "tools": tools}
