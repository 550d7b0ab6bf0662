"""
One call attempt's shared state in two store round trips (ADR 0025): the scripts.

`ADMIT_SCRIPT` runs lua/admit.lua (twin: `_twins.admit`): the breaker's permit, the rate gate,
a concurrency slot and the retry budget's share (a first attempt deposits, a retry
withdraws), all or nothing: the first step that refuses decides, and what earlier steps took
goes back inside the same atomic script. `SETTLE_SCRIPT` runs lua/settle.lua (twin:
`_twins.settle`): the gate closed for the server's wait, the slot given back with the AIMD
outcome, the breaker's record, and, when the call may retry, the gate and the budget read.
The two scripts call the parts' own programs (breaker.lua, aimd.lua, budget.lua,
gate_read.lua, gate_close.lua) as Lua functions, so each rule is still written once in Lua
and once in Python. Keys and arguments: the header of each Lua file. gateway_client's
attempt state (gateway_client/_attempt_state.py) is their caller.
"""

from __future__ import annotations

from . import _twins
from .store import AtomicScript

__all__ = ["ADMIT_SCRIPT", "SETTLE_SCRIPT"]

#: One attempt's admission: breaker, gate, slot, budget; all or nothing (lua/admit.lua).
ADMIT_SCRIPT = AtomicScript.packaged(
    "attempt_admit",
    "admit.lua",
    _twins.admit,
    parts=("gate_read.lua", "budget.lua", "aimd.lua", "breaker.lua"),
)
#: One attempt's outcome: gate close, slot release, breaker record, reads (lua/settle.lua).
SETTLE_SCRIPT = AtomicScript.packaged(
    "attempt_settle",
    "settle.lua",
    _twins.settle,
    parts=("gate_close.lua", "gate_read.lua", "budget.lua", "aimd.lua", "breaker.lua"),
)
