"""One delegation, end to end: prepare → relay → settle.

_request     what a delegation asks for, who asks, the ``RunHandle`` (shared with the task tools)
_task_args   the ``task`` tool's arguments and schema, as the model sees them
_runner      ``Runner``: one sub-agent run, from its definition to its ``SubAgentResult``;
             built from ``RunServices``, ``RunPlaces`` and ``ChildKit`` (``_run_parts``)
_prepare     a definition and the operator's settings become the child's ``Start`` (and
             when its conversation is compacted)
_relay       a live child, from its ``Start`` to its end: frames, approvals, hooks
_settle      however a child ended becomes exactly one ``SubAgentResult``
_finishing   the steps that must finish after a run is cancelled, and their owner
_results     what a run produced, as the parent records it and the model reads it
_resume      continuing a finished sub-agent from its run record
_events      live events of a whole run, tagged with who each comes from
_journaled   what the run's journal holds of a sub-agent, and a resume's use of it
"""
