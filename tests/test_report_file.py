"""Results files keep their history when a script rewrites them."""

from mle_rl.io import report_file as rf


def test_a_rewrite_puts_the_new_section_on_top_and_keeps_every_old_one(tmp_path):
    path = tmp_path / "r.md"
    rf.write_keeping_history(path, "# R\n\nwhat this is\n\n## Build 1\n\ntable 1\n")
    assert path.read_text() == "# R\n\nwhat this is\n\n## Build 1\n\ntable 1\n\n" + rf.MARKER + "\n"
    # people add analysis to the newest section and below the marker
    path.write_text(path.read_text().replace("table 1\n", "table 1\n\nwhat moved\n")
                    + "\n## Build 0 (by hand)\n\nolder\n")
    rf.write_keeping_history(path, "# R\n\nwhat this is, reworded\n\n## Build 2\n\ntable 2\n")
    text = path.read_text()
    above, below = text.split(rf.MARKER)
    assert above == "# R\n\nwhat this is, reworded\n\n## Build 2\n\ntable 2\n\n"
    assert below == "\n\n## Build 1\n\ntable 1\n\nwhat moved\n\n## Build 0 (by hand)\n\nolder\n"
    assert "what this is\n" not in text          # the preamble is the writer's current one


def test_a_report_without_the_marker_keeps_its_sections(tmp_path):
    path = tmp_path / "r.md"
    path.write_text("# Old report\n\nintro\n\n## Its build\n\nits tables\n")
    rf.write_keeping_history(path, "# New\n\n## This build\n")
    assert path.read_text() == ("# New\n\n## This build\n\n" + rf.MARKER
                                + "\n\n## Its build\n\nits tables\n")
    assert not (tmp_path / "r.md.tmp").exists()
