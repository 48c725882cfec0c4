"""The resume rule with a searcher that suggests a point again (a space smaller than num_samples): the repeat is
told again from the same done trial, the replay stops at num_samples asks, and only new points are left to run."""

from __future__ import annotations

from unitta.search.replay import DoneTrial, replay


def _asks(points: list[float], events: list[str]):
    it = iter(points)

    def ask():
        x = next(it)
        events.append(f"ask {x:g}")
        return {"x": x}, f"h{len(events)}"

    return ask


def test_a_repeated_point_is_told_again_and_does_not_end_the_replay() -> None:
    events: list[str] = []
    done = [DoneTrial({"x": 1.0}, 0.5, finished="t1"), DoneTrial({"x": 2.0}, 0.4, finished="t2")]
    result = replay(done, _asks([1.0, 1.0, 2.0, 3.0], events), lambda h, v: events.append(f"tell {v}"), limit=4)
    assert events == ["ask 1", "tell 0.5", "ask 1", "tell 0.5", "ask 2", "tell 0.4"]
    assert [t.point["x"] for t in result.replayed] == [1.0, 1.0, 2.0]
    assert result.prefetched is None and not result.unmatched  # every done trial met: the run asks on


def test_the_replay_stops_after_num_samples_asks_of_points_all_done() -> None:
    """Two open trials, both points done, a searcher that only repeats them: without the limit it never stops."""
    events: list[str] = []
    done = [DoneTrial({"x": 1.0}, 0.5, finished="t1"), DoneTrial({"x": 2.0}, 0.4, finished="t2")]
    result = replay(done, _asks([1.0, 2.0] * 10, events), lambda h, v: None, window=2, limit=5)
    assert events.count("ask 1") + events.count("ask 2") == 5 and len(result.replayed) == 5
    assert result.prefetched is None and not result.unmatched
