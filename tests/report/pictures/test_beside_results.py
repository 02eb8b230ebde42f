"""report/pictures/beside_results.py: one picture per task, named after the results file, drawn in task order."""

from __future__ import annotations

from lm_eval_longctx.report.pictures import beside_results


def test_each_task_is_drawn_beside_the_results_file_under_its_own_name(tmp_path, caplog):
    drawn = []

    def draw(task, png):
        png.write_bytes(b"png")
        drawn.append((task, png))

    results_file = tmp_path / "run" / "results_2026-11-27T10-00-00.json"
    results_file.parent.mkdir()
    with caplog.at_level("INFO", logger="lm_eval_longctx"):
        written = beside_results.draw_beside_results(results_file, ["b_task", "a_task"], draw, "a picture")
    assert written == [
        results_file.parent / "results_2026-11-27T10-00-00_b_task.png",
        results_file.parent / "results_2026-11-27T10-00-00_a_task.png",
    ]
    assert drawn == list(zip(["b_task", "a_task"], written)) and all(p.read_bytes() == b"png" for p in written)
    assert [r.getMessage() for r in caplog.records] == [f"a picture of {t} written to {p}" for t, p in drawn]
    assert beside_results.draw_beside_results(results_file, [], draw, "a picture") == []


def test_a_picture_kind_draws_each_of_its_tasks_from_the_results_it_is_given(tmp_path):
    plotted = []
    callback = beside_results.PicturesBesideResults(
        tasks=lambda results: sorted(results["results"]),
        build=lambda results, task: (task, results["results"][task]),
        plot=lambda built, png: plotted.append((built, png.name)),
        what="a picture",
    )
    results = {"results": {"t2": 2, "t1": 1}}
    written = callback(results, tmp_path / "results_x.json")
    assert written == [tmp_path / "results_x_t1.png", tmp_path / "results_x_t2.png"]
    assert plotted == [([("t1", 1)], "results_x_t1.png"), ([("t2", 2)], "results_x_t2.png")]
