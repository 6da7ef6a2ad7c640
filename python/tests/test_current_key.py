"""`exactly.current_key()`: the key of the effect whose perform, observer or `with` block is
running in this thread or asyncio task; a UsageError anywhere else."""
import asyncio
import threading

import pytest

import exactly


def deep_in_the_call():
    return exactly.current_key()


def test_outside_an_effect_it_is_a_usage_error():
    with pytest.raises(exactly.UsageError, match="outside an effect"):
        exactly.current_key()


def test_it_is_the_key_inside_perform_the_observer_and_the_block(store, uid):
    seen = {}
    with store.claim(f"job-{uid}"):
        eff = store.effect(action="a", target=f"t-{uid}")
        out = eff.run(lambda k: seen.setdefault("perform", deep_in_the_call()))
        assert seen["perform"] == out.key == eff.key
        with store.effect(action="b", target=f"t-{uid}") as e:
            seen["block"] = deep_in_the_call()
            e.result = "ok"
        assert seen["block"] == e.key
        with pytest.raises(OSError):
            with store.effect(action="c", target=f"t-{uid}") as e:
                raise OSError("lost")

        def observe(k):
            seen["observe"] = deep_in_the_call()
            return exactly.NOT_HAPPENED

        again = store.effect(action="c", target=f"t-{uid}", observe=observe)
        again.run(lambda k: "ok")
        assert seen["observe"] == again.key
    with pytest.raises(exactly.UsageError):
        exactly.current_key()


def test_nested_effects_see_the_innermost_and_get_the_outer_back(store, uid):
    with store.claim(f"job-{uid}"):
        with store.effect(action="outer", target=f"t-{uid}") as outer:
            with store.effect(action="inner", target=f"t-{uid}") as inner:
                assert exactly.current_key() == inner.key
                inner.result = "ok"
            assert exactly.current_key() == outer.key
            outer.result = "ok"


def test_a_thread_started_inside_does_not_see_it_a_task_does(store, uid):
    got = {}

    def in_thread():
        try:
            exactly.current_key()
        except exactly.UsageError as e:
            got["thread"] = e

    async def main():
        async def perform(k):
            got["task"] = await asyncio.create_task(asyncio.sleep(0, deep_in_the_call()))
            got["arun"] = deep_in_the_call()
            return "ok"

        async with store.claim(f"job-{uid}"):
            return await store.effect(action="a", target=f"t-{uid}").arun(perform)

    with store.claim(f"job2-{uid}"):
        with store.effect(action="t", target=f"t-{uid}") as e:
            t = threading.Thread(target=in_thread)
            t.start()
            t.join()
            e.result = "ok"
    assert isinstance(got["thread"], exactly.UsageError)
    out = asyncio.run(main())
    assert got["task"] == got["arun"] == out.key
