"""Every ``<form>`` the dashboard's templates hold, and the browser test that walks each.

A form is known by its template, its action (the URL name, ``{{ action }}`` or the page itself) and
what it sends: the form class it renders through ``form_fields.html`` and the names of its own inputs.
``tests/web/test_every_form_in_browser.py`` asserts the two sets are equal, so a new form, or a new
field in one, fails until a browser test walks it and is named here.
"""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
FORM = re.compile(r"<form\b(?P<tag>[^>]*)>(?P<body>.*?)</form>", re.DOTALL)
ACTION = re.compile(r"""\{%\s*url\s+['"](?P<name>[\w:-]+)['"]""")
RENDERED = re.compile(r"""form_fields\.html"(?:\s+with\s+form=(?P<form>[\w.]+))?""")
NAMED = re.compile(r"""\bname="(?P<name>[\w-]+)\"""")

FormKey = tuple[str, str, str]


def template_forms() -> list[FormKey]:
    """(template, action, what it sends) for each form in the templates, in file order."""
    found = []
    for path in sorted(TEMPLATES.rglob("*.html")):
        text = path.read_text()
        for match in FORM.finditer(text):
            tag, body = match.group("tag"), match.group("body")
            action = ACTION.search(tag)
            where = action.group("name") if action else ("{{ action }}" if "{{ action }}" in tag else "self")
            sent = [f"form={m.group('form') or 'form'}" for m in RENDERED.finditer(body)]
            sent += sorted({m.group("name") for m in NAMED.finditer(body)} - {"csrfmiddlewaretoken"})
            found.append((str(path.relative_to(TEMPLATES)), where, " ".join(sent)))
    return found


HERE = "tests/web/test_every_form_in_browser.py::"
OTHERS = "tests/web/test_key_call_and_mcp_forms_in_browser.py::"
BUTTONS = "tests/web/test_button_forms_in_browser.py::"
MCP_PAGE = "test_the_mcp_pages_buttons_refuse_hostile_hidden_values_then_act"
CONNECT = "test_connect_lists_and_classifies_a_servers_tools"
ASKED = "test_cancel_a_cycle_roll_the_adapter_and_the_router_back_after_the_browser_asks"
ACTED = "test_approve_refuses_a_changed_plan_then_deny_revoke_delete_and_log_out_act"
# Each form with typed fields, and where a browser submits it with hostile values in them.
WALKED: dict[FormKey, str] = {
    ("web/partials/profile_form.html", "{{ action }}", "form=form"): HERE
    + "test_every_field_of_a_task_profile_refuses_hostile_values_then_saves",
    ("web/partials/try_it.html", "web:profile-try", "form=trial"): HERE
    + "test_the_verifier_try_box_refuses_hostile_answers_and_requests_then_judges",
    ("web/partials/incident_form.html", "web:incidents", "form=form"): HERE
    + "test_opening_an_incident_refuses_hostile_fields_then_opens",
    ("web/partials/incident_live.html", "web:incident-rediagnose", "form=rediagnose_form"): HERE
    + "test_diagnose_again_refuses_a_mode_no_select_offers_then_starts",
    ("web/partials/keys_body.html", "web:keys", "form=form"): OTHERS
    + "test_a_keys_name_scopes_and_period_refuse_hostile_values_in_create_and_edit",
    ("web/partials/keys_body.html", "web:key-edit", "form=k.edit_form"): OTHERS
    + "test_a_keys_name_scopes_and_period_refuse_hostile_values_in_create_and_edit",
    ("web/partials/calls_body.html", "web:calls", "form=form"): OTHERS
    + "test_hostile_call_filters_are_each_named_and_the_good_ones_filter",
    ("web/mcp_server_form.html", "{{ action }}", "form=form action"): OTHERS
    + "test_registering_and_editing_an_mcp_server_refuse_hostile_fields_then_save",
    # Forms of buttons (and hidden fields the page fills in): the action, performed in a browser.
    ("registration/login.html", "login", "next"): "tests/support/browser.py::log_in (every browser test)",
    ("web/confirm.html", "{{ action }}", "confirm"): "tests/web/test_confirmations_in_browser.py::"
    "test_approve_and_start_a_cycle_with_javascript_off",
    ("web/learning.html", "web:cycle-start", ""): "tests/web/test_confirmations_in_browser.py::"
    "test_approve_and_start_a_cycle_with_javascript_off",
    ("web/partials/incident_live.html", "web:action-approve", "form=a.decision_form plan_hash"): BUTTONS
    + ACTED,
    ("web/partials/incident_live.html", "web:action-deny", ""): BUTTONS + ACTED,
    ("web/partials/keys_body.html", "web:key-revoke", ""): BUTTONS + ACTED,
    ("web/mcp_server_form.html", "web:mcp-server-delete", "confirm"): BUTTONS + ACTED,
    ("web/mcp_server_form.html", "web:mcp-server-delete", ""): BUTTONS + ACTED,
    ("base.html", "logout", ""): BUTTONS + ACTED,
    ("web/mcp.html", "self", "action server"): BUTTONS + MCP_PAGE,
    ("web/mcp.html", "self", "seen server server_fingerprint"): BUTTONS + MCP_PAGE,
    ("web/mcp.html", "self", "fingerprint server server_identity tool"): BUTTONS + MCP_PAGE,
    ("web/mcp.html", "web:mcp", "audit server tool"): BUTTONS + MCP_PAGE,
    ("web/partials/learning_live.html", "web:cycle-cancel", ""): BUTTONS + ASKED,
    ("web/partials/router_body.html", "web:router-rollback", ""): BUTTONS + ASKED,
    ("web/learning.html", "web:adapter-rollback", ""): BUTTONS + ASKED,
    ("web/mcp.html", "web:mcp-server-connect", ""): BUTTONS + CONNECT,
    # The Django admin's held-tool step (diagnostics/mcp/admin.py accept_held).
    ("admin/diagnostics/mcptool/accept_held.html", "self", "action confirmed"): "tests/web/"
    "test_admin_forms_in_browser.py::test_the_admins_accept_held_step_refuses_hostile_hidden_values_then_accepts",
}
# Forms no browser test submits yet (none now). Listed, so a new form still fails the inventory.
NOT_YET_IN_A_BROWSER: dict[FormKey, str] = {}
