"""unitta/durations.py: the one duration-in-words of the progress line's ETA and the data preparation's estimate."""

from unitta.durations import duration_text


def test_duration_text_picks_seconds_minutes_or_hours() -> None:
    assert duration_text(45) == "45 s"
    assert duration_text(119.4) == "119 s"
    assert duration_text(120) == "2 min"
    assert duration_text(7199) == "120 min"
    assert duration_text(3.4 * 3600) == "3.4 h"
