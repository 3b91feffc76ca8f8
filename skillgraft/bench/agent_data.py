"""The texts of ``skillgraft bench agent``: an operations agent's system prompt with six tools,
two more apps built from the same tools, and seven skill manuals with their routing examples."""

from __future__ import annotations

from .agent_questions import AGENT_MORE_QUESTIONS, AGENT_QUESTIONS, RESTART_QUESTIONS  # noqa: F401 (the texts' one home)

TOOLS = [
    """search_runbooks(query: string, limit: integer = 3)
  Full-text search over the team's runbooks, postmortems and service READMEs. Returns a list of
  {title, path, updated, excerpt}. Use it before answering any question about a procedure you are not sure
  of, and cite the path of every runbook you rely on. Queries work best as two to five keywords
  ("redis failover", "cert renewal staging"); the limit may be at most 10.""",
    """service_status(service: string, region: string = "all")
  The live health of one service: its replicas ready and desired, the current release id, the error rate
  and p95 latency over the last five minutes, and any open alerts. Region is one of eu-west, us-east,
  ap-south or all. Call it first whenever a user reports that something is slow, failing or down, and quote
  the numbers you got instead of guessing them.""",
    """tail_logs(service: string, since: string = "15m", level: string = "warn", lines: integer = 50)
  The latest log lines of a service from the central log store. "since" takes durations like 30s, 15m or 2h;
  level is one of debug, info, warn or error and returns that level and above; lines may be at most 500.
  Log lines can contain customer e-mail addresses and tokens: never paste more than ten lines into an answer
  and mask anything that looks like a secret, a session id or personal data.""",
    """deploy_history(service: string, limit: integer = 5)
  The latest releases of a service, newest first: release id, git commit, author, the time it went out,
  the canary result and whether it was rolled back. Use it to find the last good release before a rollback
  and to tell users what changed recently. Release ids look like r2024.11.04-3.""",
    """restart_service(service: string, region: string, reason: string)
  A rolling restart of every replica of a service in one region; replicas are replaced one at a time and the
  restart stops by itself if a new replica fails its health check. This tool changes production: describe
  what it will do and ask for an explicit "yes" before calling it, never restart more than one region per
  confirmation, and never call it for services in the payments group without a second approval.""",
    """open_incident(title: string, severity: string, summary: string, services: list[string])
  Opens an incident in the tracker, pages the on-call engineer of the first service and creates a chat
  channel. Severity is sev1 (customers cannot pay or log in), sev2 (a major feature is down or data is at
  risk), sev3 (degraded, with a workaround) or sev4 (minor). Write the summary as facts: what is broken,
  since when, who is affected and what was already tried. Return the incident id to the user.""",
]

RULES = """You are Harbor, the operations assistant of the platform team at Tidewater. Engineers from every product
team ask you about deployments, incidents, databases, certificates, DNS, access and the state of production.
You answer in English, briefly and precisely, as a senior site reliability engineer would.

How you work:
1. Read the whole question. If it names a service, check its state with service_status before you explain
   anything; if it is about a procedure, look for the runbook with search_runbooks first.
2. Prefer the team's documented procedure over general advice. When a skill manual is given to you, follow
   its steps in order and keep its exact commands, flags and file paths.
3. Show commands in fenced code blocks, one command per line, with placeholders in angle brackets such as
   <service> or <release-id>. Never invent flags. If you do not know a flag, say so.
4. Keep answers under 200 words unless the user asks for detail. Start with the answer, then the steps,
   then the checks that prove it worked.
5. Anything that changes production (restarts, rollbacks, DNS changes, key revocations, deleting data)
   needs an explicit confirmation from the user in this conversation. Describe the change, its blast radius
   and how to undo it, then wait.
6. Never print secrets. Mask tokens, passwords and private keys as ****. Do not ask users to paste them.
7. If something is on fire (error rate above 5 %, a service with no ready replicas, customers unable to pay
   or log in), suggest opening an incident with open_incident and the severity you think fits.
8. When you are unsure, say what you would check next and which tool you would use. Do not guess numbers.
9. Working hours of the platform team are 08:00 to 18:00 CET; outside them the on-call engineer is paged
   only for sev1 and sev2 incidents.

Environments: production runs in eu-west (primary), us-east and ap-south; staging runs in eu-west only.
Services are deployed with the tide command-line tool and run on the company's Kubernetes clusters; the
databases are PostgreSQL 15 with streaming replicas; certificates come from an internal ACME server and
public ones from Let's Encrypt; DNS zones live in the tide-dns service.

You can call these tools. Call a tool by answering with one JSON object {"tool": name, "arguments": {...}}
and nothing else; its result comes back in the next message.
"""

SUPPORT_RULES = """You are Quill, the assistant of the database reliability team at Tidewater. You help product engineers
back up, restore, migrate and tune their PostgreSQL databases. Be short and exact, show commands in code
blocks, and never run or suggest anything that drops, truncates or overwrites data without the user's
written confirmation. Point users to the runbook you used.
"""

ONCALL_RULES = """You are Beacon, the on-call companion of Tidewater's platform engineers. You are used at night, by tired
people, during incidents. Rules:
- Lead with the single next action. Number the steps. No more than six steps per answer.
- Check before you change: look at service_status and tail_logs before proposing a restart or a rollback.
- Every change to production needs a "yes" from the engineer. Say how to undo it.
- If customers are affected, propose an incident and its severity; keep the incident summary factual.
- Write timestamps in UTC. Mask secrets. Do not speculate about causes you have not checked.
- When the engineer says the incident is over, remind them to write the timeline into the incident.
"""

RELEASE_RULES = """You are Compass, the release assistant of Tidewater's engineering teams. You help engineers ship,
watch and undo releases of their services with the tide command-line tool.
What you do:
- Explain how a release moves: build, canary in eu-west (10 % of traffic for 15 minutes), then the other
  regions one at a time. A failed canary stops the release by itself.
- Before any rollback, look at deploy_history to find the last release whose canary passed, and at
  service_status to see whether the new release is really the cause (a dependency may be failing instead).
- Rollbacks, restarts and deploy freezes change production: ask for a clear "yes" first, and say how to
  undo the change.
- Releases are frozen from Friday 16:00 to Monday 08:00 CET and during the December freeze; a release in a
  freeze needs the approval of the release manager on duty, whom you can find with search_runbooks.
- Answer in at most 150 words, commands in code blocks with placeholders in angle brackets, no invented
  flags. Mention the runbook you used.
- If a release broke something for customers, suggest open_incident with a severity and a factual summary.
"""

TOOLS_HEADER = "\nYou can call these tools, one JSON object {\"tool\": name, \"arguments\": {...}} per message:\n"


def agent_system(rules: str = RULES, tools: tuple = (0, 1, 2, 3, 4, 5), *, lines: int = 0) -> str:
    """An app's system prompt: its rules, then the chosen tools (``lines`` > 0: the first lines of each)."""
    cut = lambda text: "\n".join(text.splitlines()[:lines]) if lines else text  # noqa: E731
    header = TOOLS_HEADER if rules is not RULES else ""
    return cut(rules) + header + "\n" + "\n".join(cut(TOOLS[i]) for i in tools)


# name -> (manual text, routing examples). "tide-rollback" is the agent's own short manual.
MANUALS = {
    "tide-rollback": (
        """Skill manual: rolling back a release with tide.
1. Find the last good release: tide releases <service> --env production --limit 5. The good one is the newest with
   canary "passed" that came before the broken one.
2. Roll back one region first: tide rollback <service> --to <release-id> --region eu-west. The command waits for the
   new replicas to become ready and prints "rollback complete".
3. Watch for five minutes: tide status <service> --region eu-west --watch. The error rate must fall below 1 %.
4. Then roll back the other regions: tide rollback <service> --to <release-id> --region us-east, then ap-south.
5. Freeze deploys so nobody ships the broken commit again: tide freeze <service> --reason "<incident id>".
The canary of a rollback is skipped on purpose: the old release already passed it, and waiting would
keep the broken one serving. A rollback never reverts database migrations: if the broken release ran a migration, keep the freeze and ask
the owning team before rolling back further. Unfreeze with tide unfreeze <service> once the fix is merged.""",
        ["how do I roll back a deployment?", "revert my service to the previous release",
         "the new release is broken, go back to the old version", "tide rollback to the last good release"],
    ),
    "postgres-backup": (
        """Skill manual: backing up and restoring PostgreSQL databases at Tidewater.
Every production database has three kinds of backups, all made by the backup service, not by hand:
- nightly base backups with pgBackRest to the object store (bucket tw-pg-backups, kept 35 days);
- continuous WAL archiving, so any point in time within the last 14 days can be restored;
- a logical dump (pg_dump, custom format) every Sunday, kept 12 weeks, for restoring single tables.
Check the backups of a database: pgbackrest --stanza=<db> info. The newest full backup must be under 26 hours
old and the WAL archive must show no gap; the alert pg-backup-stale fires otherwise.
Restore a single table from the weekly dump (the safe way: into a scratch database, never over production):
1. Create a scratch database on the restore host: createdb -h restore-01 scratch_<ticket>.
2. List the dump: pg_restore -l /backups/<db>/weekly/<date>.dump | grep <table>.
3. Restore the table only: pg_restore -h restore-01 -d scratch_<ticket> -t <table> --no-owner
   /backups/<db>/weekly/<date>.dump.
4. Compare and copy back the rows you need with a reviewed INSERT ... SELECT over postgres_fdw, inside a
   transaction, after the owning team has confirmed the row counts.
Point-in-time recovery of a whole database (for corruption or a bad migration; it needs an incident):
1. Pick the target time just before the damage, in UTC, from the application logs.
2. Restore onto a new instance: pgbackrest --stanza=<db> --type=time --target="2024-11-04 13:58:00+00"
   --target-action=promote --delta restore on a fresh host from the pg-restore pool.
3. Start PostgreSQL and wait for "database system is ready to accept connections"; check the last rows of the
   busiest tables against the chosen time.
4. Switch the service to the restored instance by changing its connection secret with tide secrets set, then
   restart the service. The old primary stays stopped, not deleted, for seven days.
Logical backups by hand are allowed only for databases under 20 GB: pg_dump -Fc -Z 6 -d <db> -f <file>.dump,
run against a replica (host <db>-replica), never against the primary during business hours.""",
        ["how do I restore a postgres table from backup?", "point in time recovery of the database",
         "check that my database backups are fresh", "pg_dump of a production database"],
    ),
    "tls-renewal": (
        """Skill manual: renewing TLS certificates at Tidewater.
There are two kinds of certificates. Internal services get certificates from the internal ACME server
(acme.internal.tidewater.io) through cert-manager in every cluster; public endpoints get Let's Encrypt
certificates through the edge proxies. Both renew automatically 30 days before expiry. A certificate that
is 14 days from expiry means the automation failed: the alert cert-expiry-14d fires and this manual applies.
Find out which certificate it is:
1. openssl s_client -connect <host>:443 -servername <host> </dev/null 2>/dev/null | openssl x509 -noout
   -subject -issuer -enddate prints the subject, the issuer and the end date.
2. The issuer says where it came from: "Tidewater Internal CA" is cert-manager, "R10" or "R11" is Let's
   Encrypt on the edge.
Internal certificates (cert-manager):
1. kubectl get certificate -n <namespace> shows READY and the renewal time; kubectl describe certificate
   <name> -n <namespace> shows the last error.
2. The usual causes are a deleted or expired ACME account secret, a DNS-01 challenge that cannot write to
   tide-dns, or a rate limit of the internal ACME server after a crash loop.
3. Force a renewal after fixing the cause: cmctl renew <name> -n <namespace>. Watch the CertificateRequest
   with kubectl get certificaterequest -n <namespace> -w until it is Approved and Ready.
4. Pods read the new secret only after a restart unless they reload it themselves: restart the deployment
   with tide restart <service> --region <region> after the change is confirmed.
Public certificates (edge proxies):
1. The edge proxies run certbot with the DNS-01 plugin for tide-dns; the renewal log is
   /var/log/letsencrypt/letsencrypt.log on edge-01 to edge-04.
2. Dry run first: sudo certbot renew --cert-name <host> --dry-run. Then renew: sudo certbot renew
   --cert-name <host>.
3. Reload, never restart, the proxy so no connection is dropped: sudo systemctl reload nginx, on each edge host
   one after the other.
4. Check from outside with the openssl command above; the end date must be about 90 days away.
Let's Encrypt allows 5 duplicate certificates a week: do not renew the same name in a loop. Never copy
private keys between hosts by hand or send them in chat; the key stays where it was made.""",
        ["my TLS certificate is about to expire", "renew the SSL certificate of a service",
         "cert-manager certificate not ready", "certbot renew on the edge proxies"],
    ),
    "k8s-crashloop": (
        """Skill manual: debugging pods in CrashLoopBackOff on Tidewater's Kubernetes clusters.
CrashLoopBackOff means a container starts, exits, and Kubernetes restarts it with a growing delay (up to five
minutes). The pod is not the problem; the process in it is. Work from the evidence, in this order.
1. Which pods, since when: kubectl get pods -n <namespace> -l app=<service> -o wide. Note the RESTARTS count,
   the node and the age. If every replica crashes, suspect the release or a dependency; if one node's pods
   crash, suspect the node.
2. Why the last run ended: kubectl describe pod <pod> -n <namespace>. Look at "Last State": the exit code and
   the reason.
   - Exit code 137 with reason OOMKilled: the container used more memory than its limit. Compare the limit
     with the usage in the service dashboard before raising it; a leak needs a fix, not a bigger limit.
   - Exit code 1 or 2: the application exited with an error; read its logs (step 3). Exit code 143: it was
     sent SIGTERM, often by a failing liveness probe (see the Events).
3. What it said before it died: kubectl logs <pod> -n <namespace> --previous --tail=100. Without --previous
   you see the new run, which may not have logged anything yet.
4. What Kubernetes saw: the Events at the end of kubectl describe pod. "Liveness probe failed" with a
   timeout means the process is alive but too slow to answer: a probe with initialDelaySeconds shorter than
   the start-up time kills it in a loop. "Back-off pulling image" is not a crash loop but an image problem.
5. Configuration: missing environment variables and secrets are the most common cause after a release;
   tide secrets list <service> shows which secrets exist per environment.
6. Dependencies: if the logs show connection refused or timeouts to a database or another service, check
   that dependency with service_status first. Restarting a service whose database is down only adds load.
Fixes, from the least to the most invasive:
- a bad release: roll back (see the rollback manual) and freeze deploys;
- a wrong probe: fix initialDelaySeconds or use a startupProbe in the service's chart, then deploy;
- a memory limit that is really too small: raise it in the chart by at most 50 % at a time;
- a broken node: cordon it (kubectl cordon <node>) and delete its crashing pods so they move.
Never use kubectl edit on production deployments. If more than half of a service's replicas crash for over
ten minutes, open a sev2 incident.""",
        ["my pod is in CrashLoopBackOff", "kubernetes container keeps restarting",
         "pod OOMKilled exit code 137", "liveness probe failed and the pod restarts"],
    ),
    "dns-change": (
        """Skill manual: changing DNS records at Tidewater.
All zones (tidewater.io, tidewater.internal and the customer vanity domains) live in the tide-dns service,
which pushes them to the public DNS provider and to the internal resolvers. Records are changed through
pull requests to the dns-zones repository, never in the provider's web console: a change made there is
overwritten at the next push.
1. Lower the TTL first if the record will move: set ttl: 300 on the record, merge, and wait for the old TTL
   to pass (most records have 3600 seconds) before the real change.
2. Edit zones/<zone>.yaml: one entry per record with name, type (A, AAAA, CNAME, TXT, MX, CAA), ttl and
   values. A CNAME cannot share its name with any other record, and the zone apex cannot be a CNAME: use the
   ALIAS type for the apex.
3. Validate locally: tide dns check zones/<zone>.yaml. It rejects duplicates, CNAME conflicts and records
   that point at addresses outside Tidewater's ranges without an "external: true" flag.
4. Open the pull request; the review needs one person from the owning team and one from the platform team.
   The pipeline shows a diff of what will change at the provider. Merging pushes within two minutes.
5. Verify from outside: dig +short <name> <type> @1.1.1.1 and from inside: dig +short <name> <type>
   @10.0.0.53. Both must show the new value once the old TTL has passed.
6. Raise the TTL back to 3600 the next day.
Deleting a record needs the owning team's confirmation that nothing uses it: search the service configs
and the logs of the edge proxies for the name first. MX and SPF (TXT) changes need the e-mail team, CAA
changes the security team. A wrong record is undone by reverting the pull request; the old value returns
after the TTL, which is why the TTL goes down before risky changes.""",
        ["how do I change a DNS record?", "point a domain to a new IP address",
         "add a CNAME for my service", "lower the TTL before a DNS migration"],
    ),
    "disk-full": (
        """Skill manual: a disk that is filling up or full on a Tidewater host or volume.
A full disk breaks things in unhelpful ways: databases stop accepting writes, services fail to write logs
and crash, package installs fail half way. The alert disk-usage-85 fires at 85 % and disk-usage-95 pages the
on-call engineer. Act at 85 %; at 95 % treat it as an incident.
Find what is big, on the host:
1. df -h shows each file system, its size and use; df -i shows inodes, which can run out while space is
   left (millions of small files: session files, cache entries, mail queues).
2. sudo du -xh --max-depth=1 / | sort -h | tail -15 shows the biggest directories on the root file system
   without crossing into other mounts; repeat in the biggest one until you find the culprit.
3. Deleted files that are still open keep their space: sudo lsof +L1 lists them. The space returns only when
   the process holding them closes them or restarts.
The usual culprits and what to do:
- Application logs in /var/log/<service>/ that are not rotated. Rotation is done by logrotate with the
  file /etc/logrotate.d/<service>: daily, rotate 7, compress, delaycompress, missingok, notifempty, and
  copytruncate only for applications that cannot reopen their log file. Test it with sudo logrotate -d
  /etc/logrotate.d/<service> (a dry run), then force one rotation with sudo logrotate -f
  /etc/logrotate.d/<service>.
- The systemd journal: journalctl --disk-usage shows its size. Shrink it with sudo journalctl
  --vacuum-size=1G and make the limit permanent with SystemMaxUse=1G in /etc/systemd/journald.conf,
  then sudo systemctl restart systemd-journald.
- Old container images and stopped containers on build hosts: sudo docker system df shows them; sudo docker
  image prune -a --filter "until=168h" removes images unused for a week. Never prune on hosts that run
  production containers without checking what is running.
- Core dumps in /var/lib/systemd/coredump (keep the newest) and package caches (sudo apt-get clean).
- A database volume: never delete files inside a PostgreSQL data directory, not even old-looking WAL
  segments in pg_wal. A growing pg_wal means archiving or a replication slot is stuck: check
  pg_stat_archiver and pg_replication_slots, and call the database team.
Do not delete log files that a process still writes to (truncate them with sudo truncate -s 0 <file>), do
not rm -rf in /var/lib. When the disk is back under 80 %, write why it grew into the alert's ticket.""",
        ["the disk is full on my server", "no space left on device", "logrotate is not rotating the logs",
         "the journal uses too much disk"],
    ),
    "ssh-access": (
        """Skill manual: SSH access and key rotation at Tidewater.
Nobody logs in to production hosts with long-lived keys. Engineers get short-lived SSH certificates from
the internal certificate authority through the tide CLI, valid for eight hours:
1. tide login (single sign-on in the browser), then tide ssh cert. The certificate is written next to your
   key as ~/.ssh/id_ed25519-cert.pub and loaded into your ssh-agent.
2. Connect through the bastion: ssh -J bastion.tidewater.io <user>@<host>. Hosts trust the CA, not your key.
3. Access is granted per group in the access repository (groups/<team>.yaml): production hosts need the
   group prod-ssh, which needs a manager's approval in the pull request and expires after 90 days.
Keys: use ed25519 keys made with ssh-keygen -t ed25519 -a 100 -C "<you>@tidewater.io" and a passphrase.
RSA keys under 3072 bits are refused by the CA. Never copy your private key to a server or share it.
Rotating a key (every year, or at once if a laptop is lost or a key may have leaked):
1. Make a new key pair as above; register the public key with tide ssh register ~/.ssh/id_ed25519_new.pub.
2. Revoke the old one: tide ssh revoke --key <fingerprint>; the fingerprint comes from ssh-keygen -lf
   <key>.pub. Revocation reaches every host's revoked-keys list within five minutes.
3. Certificates made with the old key stay valid until they expire (at most eight hours); for a suspected
   leak ask the security team to revoke them too, with tide ssh revoke --serial <n>.
Service accounts (deploy bots, backup jobs) use keys stored in the secret manager, rotated every 90 days by
the rotation job; rotate one by hand with tide secrets rotate <account>-ssh and restart the job.
Troubleshooting: "Permission denied (publickey)" usually means an expired certificate (run tide ssh cert
again) or a missing group; ssh -v shows which certificate was offered. "Host key verification failed"
after a host was rebuilt: hosts have CA-signed host keys, so remove the old line with ssh-keygen -R <host>
and connect again; a warning about a changed host key on a host that was not rebuilt must be reported to
the security team before you connect.""",
        ["how do I rotate my ssh key?", "permission denied publickey on the bastion",
         "get ssh access to production hosts", "revoke an ssh key after a lost laptop"],
    ),
}

# The reference tables at the end of the six manuals: one row per service.
SERVICES = ("checkout", "ledger", "search-api", "billing-api", "payments-worker", "orders", "inventory", "notifications",
            "auth", "profile", "catalog", "pricing", "shipping", "returns", "reports", "webhooks", "invoices",
            "status-page")
TEAMS = ("commerce", "payments", "growth", "identity", "platform", "data")
TABLES = {
    "postgres-backup": ("Databases, sizes and backup windows:", lambda i, s, t: (
        f"- {s.replace('-', '_')}_db: {12 + 37 * i % 400} GB, primary {s}-pg-1, replica {s}-pg-2, base backup at "
        f"{1 + i % 5:02d}:{15 * (i % 4):02d} UTC, weekly dump {'kept' if i % 3 else 'skipped (over 200 GB)'}, owner {t}")),
    "tls-renewal": ("Certificates and where they come from:", lambda i, s, t: (
        f"- {s}.tidewater.io: {'Let' + chr(39) + 's Encrypt on the edge' if i % 3 == 0 else 'Tidewater Internal CA'}, "
        f"namespace {t}, secret {s}-tls, {'reloads itself' if i % 2 else 'needs a restart after renewal'}")),
    "k8s-crashloop": ("Services, limits and start-up times (production):", lambda i, s, t: (
        f"- {s} in namespace {t}: {2 + i % 6} replicas, memory limit {256 * (1 + i % 8)} MiB (request "
        f"{128 * (1 + i % 8)} MiB), CPU limit {250 * (1 + i % 4)}m, start-up {5 + 7 * i % 60} s, liveness delay "
        f"{15 + 7 * i % 60} s, readiness on /healthz port {8000 + i}")),
    "dns-change": ("Records that other teams depend on:", lambda i, s, t: (
        f"- {s}.tidewater.io CNAME {s}.{('eu-west', 'us-east', 'ap-south')[i % 3]}.lb.tidewater.io, ttl "
        f"{(3600, 300, 86400)[i % 3]}, owner {t}")),
    "disk-full": ("Host classes, volumes and log retention:", lambda i, s, t: (
        f"- {s} hosts ({s}-01 to {s}-{2 + i % 9:02d}): root 40 GB, data {50 * (1 + i % 10)} GB on /srv, logs "
        f"{10 * (1 + i % 5)} GB on /var/log kept {(7, 14, 30)[i % 3]} days, journald limit {1 + i % 2} GB, owner "
        f"{t}, alert at {(85, 80, 90)[i % 3]} %")),
    "ssh-access": ("Access groups and their approvers:", lambda i, s, t: (
        f"- group {s}-ssh: hosts {s}-*, approved by the {t} engineering manager, reviewed every "
        f"{(30, 60, 90)[i % 3]} days, {'sudo allowed' if i % 4 == 0 else 'no sudo'}")),
}


def manual_text(name: str, *, lines: int = 0) -> str:
    """A manual's text with its reference table (``lines`` > 0: only its first lines, no table)."""
    text = MANUALS[name][0]
    if lines:
        return "\n".join(text.splitlines()[:lines])
    if name not in TABLES:
        return text
    title, row = TABLES[name]
    return text + "\n" + title + "\n" + "\n".join(row(i, s, TEAMS[i % len(TEAMS)]) for i, s in enumerate(SERVICES))

# "three apps": (system prompt, the manual its questions route to, one question per round); any two fit one KV.
APPS = (
    ((SUPPORT_RULES, (0, 1, 2, 3)), "postgres-backup", (
        "How do I restore a single table from last Sunday's postgres dump without touching production?",
        "How can I check that the nightly pgBackRest backups of the orders database are fresh?",
        "We need a point in time recovery of the ledger database to 13:58 UTC; what are the steps?")),
    ((ONCALL_RULES, (1, 2, 4, 5, 0, 3)), "tide-rollback", (
        "It is 03:00 and checkout errors jumped after the last release; what is the safest way to roll it back?",
        "The rollback of checkout in eu-west is done; how long do I watch before rolling back us-east?",
        "Should I freeze deploys of orders after tonight's rollback, and how?")),
    ((RELEASE_RULES, (3, 1, 0, 4, 2, 5)), "tide-rollback", (
        "The canary of search-api failed after it went out; how do I roll back to the previous release?",
        "How do I roll back only the us-east region of the checkout service with tide?",
        "After a rollback, how do I stop people from deploying the broken commit again?")),
)

SKILL_QUESTIONS = {  # "six skills": its six manuals, one question each per round
    "postgres-backup": ("How do I restore a single table from the weekly postgres dump?",
                        "Is it safe to run pg_dump against the primary database at noon?",
                        "What does the pg-backup-stale alert mean and how do I check the postgres backups?"),
    "tls-renewal": ("The TLS certificate of api.tidewater.io expires in 12 days; how do I renew it?",
                    "cert-manager says my certificate is not ready, what should I check?",
                    "How do I renew a Let's Encrypt certificate on the edge proxies with certbot?"),
    "k8s-crashloop": ("My payments-worker pods are in CrashLoopBackOff since the last release; how do I debug it?",
                      "A pod shows exit code 137 OOMKilled; should I raise its memory limit?",
                      "The liveness probe keeps killing my container during start-up; how do I fix it?"),
    "dns-change": ("How do I point status.tidewater.io to a new IP address in DNS?",
                   "Should I lower the TTL before moving a DNS record?",
                   "How do I add a CNAME DNS record for my new service?"),
    "disk-full": ("The disk on worker-07 is 90 % full; how do I find what is using the space?",
                  "logrotate is not rotating the logs of my service; how do I test it?",
                  "No space left on device on a build host full of old docker images; how do I clean it?"),
    "ssh-access": ("How do I rotate my SSH key?",
                   "I get Permission denied (publickey) at the bastion; what is wrong?",
                   "My laptop was stolen; how do I revoke my SSH key?"),
}
