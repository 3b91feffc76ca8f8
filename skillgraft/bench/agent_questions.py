"""The agent benchmark's questions to its one app (all route to ``tide-rollback``)."""

AGENT_QUESTIONS = (  # "agent" and "restart": all route to tide-rollback
    "The latest release of checkout is throwing errors; how do I roll back to the previous release?",
    "How do I find the last good release before rolling back search-api?",
    "Should I roll back all regions at once, or one region first?",
    "How long should I watch the service after a rollback in eu-west?",
    "How do I freeze deploys after rolling back a broken release?",
    "Does tide rollback also revert the database migrations of the release?",
)
AGENT_MORE_QUESTIONS = (  # "agent", rounds 7-18: more of the same app's questions, for a steadier median
    "Before rolling back payments, which tide command lists its last releases and their canary results?",
    "The canary was skipped during my rollback of search-api; is that a problem?",
    "How do I know that the rollback of checkout in eu-west has finished?",
    "What error rate should checkout reach before I roll back us-east?",
    "After eu-west, which region do I roll back next with tide?",
    "What reason should I give when I freeze deploys of the orders service?",
    "How do I unfreeze checkout once the fix for the broken release is merged?",
    "The broken release of billing ran a database migration; can I still roll it back?",
    "Can I roll back ap-south before us-east, or does the order matter?",
    "How do I pick the right release id for tide rollback when two releases failed in a row?",
    "What should I watch with tide status while the rollback of payments is running?",
    "Who do I ask before rolling back further when a migration is involved?",
)
RESTART_QUESTIONS = (
    "I rolled back billing-api but the errors continue; can I roll back one more release with tide?",
    "What does rollback complete mean in the output of tide rollback?",
    "Can I roll back the orders service in ap-south only, with tide?",
)
