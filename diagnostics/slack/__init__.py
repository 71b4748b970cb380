"""The Slack incident bot: ``/sre diagnose``, mentions, live progress in a thread, approve / deny buttons.

Off until SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET are set. The HTTP endpoint (slack_bolt with its
Django adapter) only verifies, deduplicates, records and acknowledges; the work (opening the
incident, posting to Slack, deciding on actions) runs on Celery tasks that take ids.
"""
