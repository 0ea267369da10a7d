"""Hypothesis's entry point: ``st.from_type`` learns the library's types when hypothesis loads.

Hypothesis calls the hook while it is being imported, which may be from inside ``import
analytic.strategies`` itself; so this module imports nothing at load time and the strategies are
deferred until a test first draws from them.
"""


def _hypothesis_setup_hook():
    from hypothesis import strategies as st

    from . import Hardware, Layout, Model, Plan
    from . import strategies as ours

    st.register_type_strategy(Layout, st.deferred(lambda: ours.layouts()))
    st.register_type_strategy(Model, st.deferred(lambda: ours.models()))
    st.register_type_strategy(Hardware, st.deferred(lambda: ours.hardwares()))
    st.register_type_strategy(Plan, st.deferred(lambda: ours.plans(gpus=8)))
