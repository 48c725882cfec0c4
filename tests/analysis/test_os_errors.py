"""An operating-system error while writing figures (a folder where a file goes, disk full, read-only) is one line
naming the path and the errno, exit 2, never a traceback."""

from __future__ import annotations

from analysis import heatmaps


def test_a_folder_in_the_way_of_an_output_file(seeded_dir, tmp_path, capsys):
    out = tmp_path / "figures"
    (out / "table_fmnist-c.md").mkdir(parents=True)
    assert heatmaps.main([str(seeded_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Is a directory (EISDIR)" in err and "table_fmnist-c.md" in err
