"""The full lane: the tests `python -m tests` (the README's command, CI) leaves to `python -m tests --full`.

Three lanes by cost (issue 65): the fast lane (in process, about a minute: the edit-and-test loop), the standard lane
(what CI runs on every change: every test but these, within the project's 12 minutes on two cores) and the full lane
(everything: before a release, after a change to what these cover, and on a schedule). A test is here when it costs
over about 12 s on two cores (measured with `python -m tests --full --durations=0`, the figure beside it) *and*
another test of the standard lane runs the same real part (the binary, the store, the browser, the process kind) on
a cheaper path: each entry names the standard-lane test that keeps its part covered, so nothing real leaves CI
unseen. `tests/unit/test_suite_runner.py` checks that every entry names a test that exists.

Invariant: an entry is a module (`path`), a test (`path::name`, all its parameters) or one parameter of a test
(`path::name[id]`); nothing else selects the lane.
"""

from __future__ import annotations

FULL_ONLY: dict[str, str] = {
    # --- the first pass (figures: 2026-12-08, three workers on two cores, test seconds with setup)
    "tests/integration/test_container_image.py":  # 136 s
        "the only image build (podman, debootstrap); what the image runs is the demo of tests/integration/"
        "test_demo_cli.py",
    "tests/unit/contract/test_api_fuzz.py::test_no_operation_answers_5xx_or_breaks_its_schema[loopback-server]":
        # 40 s
        "the same fuzz, seeded, on a server with a token: test_no_operation_answers_5xx_or_breaks_its_schema["
        "token-server]",
    "tests/unit/contract/test_api_fuzz.py::test_no_operation_answers_5xx_or_breaks_its_schema[postgresql-store]":
        # 75 s
        "PostgreSQL's own errors are kept by tests/unit/contract/test_hostile_input.py and the [postgresql] store "
        "tests",
    "tests/integration/test_profile_on_demand.py::test_the_cli_requests_waits_fetches_and_uploads":  # 69 s
        "a real profile of a real process end to end: test_one_step_on_one_rank_yields_exactly_that_trace",
    # the other scenarios of a profile on demand (10 s each, one after another on one worker: the first pass's
    # longest chain); the book's rules for each: tests/unit/server/rooms/profiles/test_book.py
    "tests/integration/test_profile_on_demand.py::test_cancel_mid_window_discards_the_trace_and_says_so":
        "a cancel's rule: tests/unit/server/rooms/profiles/test_book.py",
    "tests/integration/test_profile_on_demand.py::test_a_second_request_for_a_busy_process_is_refused_visibly":
        "a busy process's rule: tests/unit/server/rooms/profiles/test_book.py",
    "tests/integration/test_profile_on_demand.py::test_an_export_that_fails_is_reported_with_its_reason":
        "a failed export's rule: tests/unit/server/rooms/profiles/test_book.py",
    "tests/integration/test_profile_on_demand.py::test_a_stage_of_one_step_is_profiled_alone":
        "a real profile of a real process: test_one_step_on_one_rank_yields_exactly_that_trace",
    "tests/integration/test_profile_on_demand.py::test_an_upload_interrupted_by_a_server_restart_resumes_where_the_"
    "server_is":
        "resumable uploads: tests/unit/server/rooms/profiles/test_book.py",
    "tests/integration/test_demo_cli.py::test_demo_exits_non_zero_when_nothing_was_stored":  # 13 s
        "the demo's own run: tests/integration/test_demo_cli.py test_the_slime_shape_reports_slimes_keys_with_role_and_"
        "rank",
    "tests/integration/test_dashboards_on_demo.py":  # 70 s: four demos and Prometheus (its tests share them)
        "Grafana's queries on the real Prometheus: tests/e2e/test_ui_prometheus.py "
        "test_ui_numbers_equal_grafanas_queries_on_the_same_prometheus; every board's queries parsed: "
        "tests/unit/test_dashboards.py",
    "tests/integration/test_stack_snapshots.py::test_the_late_rank_is_named_and_nobody_moves":  # 47 s
        "a real gloo job with the flight recorder: tests/integration/test_flight_recorder_agreement.py; the "
        "verdict's rules: tests/unit/server/rooms/stacks/test_verdict.py",
    "tests/integration/test_stack_snapshots.py::test_each_collective_fault_of_a_real_job_gets_its_verdict":  # 44 s
        "a real gloo job with the flight recorder: tests/integration/test_flight_recorder_agreement.py; each fault's "
        "class: tests/unit/server/rooms/stacks/test_verdict.py",
    "tests/integration/test_stack_snapshots.py::test_ray_actors":  # 35 s
        "a real Ray job: tests/integration/test_ray_end_of_job.py",
    "tests/integration/test_alerting.py::test_a_user_rule_fires_in_prometheus_with_its_text_literal":  # 38 s
        "real Prometheus and Alertmanager delivering: test_a_thousand_lane_stall_is_one_notification_then_hung_then_"
        "resolved; a user rule's text: tests/unit/server/prometheus/test_resolved_alerts.py",
    "tests/integration/test_alerting.py::test_the_demos_nan_and_precision_drift_faults_fire_their_rules":  # 31 s
        "the rules' expressions against promtool: tests/unit/test_rules.py",
    "tests/integration/test_alerting.py::test_a_restarted_server_with_a_receiver_does_not_ask_for_one":  # 16 s
        "a receiver delivered to by the real Alertmanager: test_a_receiver_added_while_a_stall_fires_gets_one_message",
    "tests/integration/test_analysis_fanout.py":  # 56 s
        "real torch traces analysed: tests/unit/analysis/test_analysis.py",
    "tests/integration/test_store_backends.py":  # 32 s
        "each store kind on both engines: the [postgresql] tests of tests/unit/server/runstore/",
    "tests/integration/test_full_stack.py::test_five_services_rendered_configs_credentials_logs_and_stop":  # 31 s
        "the supervisor with real services: test_missing_optional_services_start_degraded",
    "tests/unit/analysis/test_verl_names.py::test_real_traces_named_like_verl_are_read_right_and_selectable_in_either_"
        "spelling":  # 24 s
        "real torch traces: tests/unit/analysis/test_analysis.py; verl's names: test_grammar_follows_build_trace_"
        "basename",
    "tests/integration/test_fleet.py::test_a_profile_requested_on_one_server_is_taken_through_the_other":  # 23 s
        "two servers on one PostgreSQL store behind haproxy: test_a_target_registered_and_archived_through_one_"
        "server_reaches_the_other",
    "tests/integration/test_fleet.py::test_a_stack_snapshot_asked_on_one_server_gets_the_processes_of_both":  # 21 s
        "the fleet's shared records: test_a_target_registered_and_archived_through_one_server_reaches_the_other",
    "tests/integration/test_fleet.py::test_prometheus_counts_a_client_that_moved_once":  # 20 s
        "a client's totals across servers: test_behind_round_robin_a_process_is_counted_once_and_resends_once_per_"
        "server",
    "tests/integration/test_fleet.py::test_a_server_killed_mid_run_loses_nothing":  # 17 s
        "a killed ingest server loses nothing: tests/integration/test_stack.py test_counter_totals_exact_after_"
        "sigkill_of_ingest_server",
    "tests/integration/test_fleet.py::test_the_documented_balancer_keeps_each_process_on_one_server":  # 15 s
        "the balancer's configuration: test_behind_round_robin_a_process_is_counted_once_and_resends_once_per_server",
    "tests/integration/test_trajectories.py::test_real_mlflow_rollout_traces_and_vllm_requests_become_trajectories":
        # 21 s
        "real MLflow traces over OTLP: tests/unit/server/intake/test_otlp_intake.py test_real_mlflow_tracing_"
        "exported_over_otlp_lands_in_the_run",
    "tests/integration/test_ledger_online_offline.py":  # 17 s
        "the ledger's definition both ways: tests/unit/semantics/test_ledger.py",
    "tests/unit/analysis/test_explain_offline.py::test_analyze_compare_on_real_torch_traces":  # 17 s
        "the compare on event tables: test_step_facts_and_the_compare_name_the_slow_replica",
    "tests/integration/test_ack_durability.py::test_an_answered_action_is_in_the_audit_log_across_sigkills":  # 16 s
        "acknowledged writes across SIGKILLs: test_two_sigkills_lose_no_acknowledged_sample_or_span_and_store_none_"
        "twice",
    # --- the browser pass (Chromium itself, the run page and its charts stay: tests/e2e/test_ui.py,
    # test_ui_charts.py, test_ui_explain.py, test_ui_prometheus.py, test_ui_roles.py, test_ui_runs.py)
    "tests/e2e/test_ui_trajectories.py":  # 56 s
        "the trajectories' answers: tests/unit/server/runstore/trajectories/test_index.py; the browser: "
        "tests/e2e/test_ui.py",
    "tests/e2e/test_ui_stacks.py":  # 69 s
        "the verdict and the hung run: tests/unit/server/rooms/stacks/test_verdict.py, tests/unit/server/live/"
        "test_run_conditions.py",
    "tests/e2e/test_ui_profiles.py":  # 62 s
        "a profile on demand end to end: tests/integration/test_profile_on_demand.py test_one_step_on_one_rank_"
        "yields_exactly_that_trace",
    "tests/e2e/test_ui.py::test_demo_run_in_tensorboard_and_as_an_offline_wandb_run":  # 26 s
        "the exports: tests/unit/test_export.py",
    "tests/e2e/test_ui_charts.py::test_compare_names_runs_and_shows_both_cards_and_timelines":  # 23 s
        "two runs compared in the browser: tests/e2e/test_ui_explain.py test_compare_says_where_the_time_went_and_"
        "draws_the_critical_path",
    "tests/e2e/test_ui_honest_state.py":  # 21 s
        "a lost run and a stopped server: tests/unit/server/live/test_liveness.py",
    "tests/e2e/test_ui_moe.py":  # 20 s
        "the heatmap's numbers: tests/unit/semantics/test_moe.py",
    "tests/e2e/test_ui_prometheus.py::test_panels_and_a_firing_alert_in_the_browser":  # 17 s
        "Prometheus in the browser: test_ui_numbers_equal_grafanas_queries_on_the_same_prometheus; a firing alert: "
        "tests/integration/test_alerting.py test_a_thousand_lane_stall_is_one_notification_then_hung_then_resolved",
    "tests/e2e/test_ui_prometheus.py::test_who_is_told_silences_and_a_rule_in_two_clicks_on_the_run_page":  # 14 s
        "receivers, silences and rules over HTTP: tests/unit/server/access/test_route_matrix.py; the alerting "
        "panel in the browser: tests/e2e/test_ui_roles.py",
    "tests/e2e/test_ui_steps.py":  # 16 s
        "the selected step on every chart: tests/e2e/test_ui_charts.py test_hover_values_a_shared_crosshair_and_"
        "the_selected_step_on_every_chart",
}


def in_full_lane(nodeid: str) -> bool:
    """Whether the test `nodeid` (pytest's, parameters included) runs only in the full lane."""
    module, _, rest = nodeid.partition("::")
    return module in FULL_ONLY or f"{module}::{rest.split('[', 1)[0]}" in FULL_ONLY or nodeid in FULL_ONLY
