"""The simulated developer's data: projects, note templates, habits, preferences.

Tables for :mod:`benchmarks.simulated_user` (its docstring describes the user they make);
``<field>`` in a template is a project detail from :data:`PROJECTS`, ``[a|b]`` a random
alternative.
"""

from __future__ import annotations

from datetime import datetime

TOPICS = ("deploy", "migrations", "tests", "auth", "logging", "ci", "deps", "config")
OLD_MAIN, SECOND, SIDE, NEW_MAIN = "acme-api", "ledger", "tidepool", "orbit-web"
VAGUE_SHARE_RANGE = (0.30, 0.55)  # documented share of vague contexts (any seed, 200 sessions)
SCOPED_SHARE = 0.3  # probability that a project note is stored with ``project`` set
MENTION_SHARE = 0.4  # probability that a project note whose template lacks the name gets a "name: " prefix
START = datetime(2024, 1, 8)  # a Monday

PROJECTS = {  # detail fields, substituted into <field> placeholders
    OLD_MAIN: dict(
        name=OLD_MAIN,
        stack="python postgres docker",
        lang="Python",
        fw="FastAPI",
        db="Postgres",
        orm="Alembic",
        mig_cmd="alembic upgrade head",
        mig_dir="migrations/versions",
        table="invoices",
        test_cmd="pytest -n auto",
        test_tool="pytest",
        ci="GitHub Actions",
        ci_file=".github/workflows/ci.yml",
        deploy_tool="make release",
        target="fly.io",
        rollback="fly releases rollback",
        auth="Auth0",
        log_lib="structlog",
        log_sink="Datadog",
        channel="#acme-backend",
        pkg="uv",
        lockfile="uv.lock",
        bot="Dependabot",
        env_file=".env.local",
        secrets="fly secrets",
    ),
    SECOND: dict(
        name=SECOND,
        stack="go postgres docker",
        lang="Go",
        fw="chi",
        db="Postgres",
        orm="golang-migrate",
        mig_cmd="make migrate-up",
        mig_dir="db/migrations",
        table="journal_entries",
        test_cmd="go test -race ./...",
        test_tool="go test",
        ci="GitHub Actions",
        ci_file=".github/workflows/deploy.yml",
        deploy_tool="the deploy.yml workflow",
        target="the EKS cluster through Argo CD",
        rollback="argocd app rollback ledger",
        auth="Keycloak OIDC",
        log_lib="zerolog",
        log_sink="Loki/Grafana",
        channel="#ledger-dev",
        pkg="go mod",
        lockfile="go.sum",
        bot="Renovate",
        env_file="config/local.yaml",
        secrets="AWS Secrets Manager",
    ),
    SIDE: dict(
        name=SIDE,
        stack="node sqlite",
        lang="TypeScript",
        fw="SvelteKit",
        db="SQLite (D1 via miniflare)",
        orm="Drizzle",
        mig_cmd="pnpm drizzle-kit migrate",
        mig_dir="drizzle/",
        table="tide_readings",
        test_cmd="pnpm vitest run",
        test_tool="Vitest",
        ci="GitHub Actions",
        ci_file=".github/workflows/check.yml",
        deploy_tool="wrangler deploy",
        target="Cloudflare Workers",
        rollback="wrangler rollback",
        auth="Lucia sessions",
        log_lib="a small JSON console wrapper",
        log_sink="Sentry",
        channel="my personal email",
        pkg="pnpm",
        lockfile="pnpm-lock.yaml",
        bot="Renovate",
        env_file=".dev.vars",
        secrets="wrangler secret",
    ),
    NEW_MAIN: dict(
        name=NEW_MAIN,
        stack="python postgres docker",
        lang="Python",
        fw="Django",
        db="Postgres",
        orm="Django",
        mig_cmd="./manage.py migrate",
        mig_dir="each app's migrations/ folder",
        table="bookings",
        test_cmd="pytest --reuse-db",
        test_tool="pytest-django",
        ci="GitLab CI",
        ci_file=".gitlab-ci.yml",
        deploy_tool="the GitLab deploy job and Terraform",
        target="AWS ECS",
        rollback="re-running the previous pipeline's deploy job",
        auth="django-allauth with Okta SSO",
        log_lib="structlog",
        log_sink="Honeycomb (OpenTelemetry)",
        channel="#orbit-eng",
        pkg="Poetry",
        lockfile="poetry.lock",
        bot="Renovate",
        env_file=".env",
        secrets="SSM Parameter Store",
    ),
}

# Per topic: 4 static notes (type, template), then 6 incident notes ("lessons", learned over time).
# <field> = project detail, [a|b] = a random alternative.
FACTS = {
    "deploy": [
        (
            "procedural",
            "Deploys go out via <deploy_tool> to <target>; wait for the health check to pass before announcing the release.",
        ),
        (
            "procedural",
            "Rollback path for a bad deploy: <rollback>, then write an incident note; don't hotfix forward under pressure.",
        ),
        ("decision", "Decided to deploy <name> only from main after CI is green, and never on Friday afternoons."),
        (
            "fact",
            "The deploy pipeline builds once per commit and promotes the same artifact from staging to production on <target>.",
        ),
    ],
    "migrations": [
        (
            "procedural",
            "Run migrations with `<mig_cmd>`; new migration files live in <mig_dir> and get reviewed like code.",
        ),
        (
            "decision",
            "Migrations on the <table> table must be backwards compatible: add columns nullable, backfill, then enforce.",
        ),
        (
            "fact",
            "<orm> migrations run automatically in the release step, so a broken migration blocks the whole deploy.",
        ),
        (
            "procedural",
            "To test a migration locally: restore the anonymized <table> snapshot, run `<mig_cmd>`, then the smoke tests.",
        ),
    ],
    "tests": [
        (
            "procedural",
            "Full test suite: `<test_cmd>`; it needs the local database up, otherwise the integration tests fail.",
        ),
        ("fact", "Integration tests in <name> use a real <db>; unit tests must not touch the network."),
        (
            "decision",
            "Snapshot tests were dropped for explicit assertions; they hid regressions in the <table> serializers.",
        ),
        ("fact", "<test_tool> tests marked slow are skipped locally and only run in the nightly <ci> pipeline."),
    ],
    "auth": [
        (
            "fact",
            "Auth is handled by <auth>; the <lang> service validates tokens on every request and caches the keys for 10 minutes.",
        ),
        (
            "procedural",
            "For a local auth token, log in as the seeded dev user from <env_file> and copy the token from the response.",
        ),
        (
            "decision",
            "Service-to-service calls in <name> use a separate client credential, never a user's token; scopes are checked per route.",
        ),
        (
            "fact",
            "Role checks for <table> live in one permissions module in <name>; no role string comparisons in handlers.",
        ),
    ],
    "logging": [
        (
            "fact",
            "Logs are emitted with <log_lib> as JSON and shipped to <log_sink>; search by request_id to follow one request.",
        ),
        (
            "decision",
            "PII must never be logged: emails and tokens are redacted in the <log_lib> setup before shipping.",
        ),
        (
            "procedural",
            "To debug production, filter <log_sink> by service <name> and level warn or above, then pivot on request_id.",
        ),
        (
            "fact",
            "Error alerts from <log_sink> go to <channel>; five minutes of 5xx responses pages whoever is on call.",
        ),
    ],
    "ci": [
        (
            "fact",
            "CI runs on <ci> (<ci_file>): lint, type check, then tests; the whole pipeline takes about ten minutes.",
        ),
        (
            "procedural",
            "If the build fails only in CI, re-run the <ci> job with debug logging and compare the <pkg> cache key.",
        ),
        (
            "decision",
            "Branch protection on <name> requires green CI and one review; the merge queue re-runs the build.",
        ),
        (
            "fact",
            "The CI cache is keyed on <lockfile>; changing it invalidates the cache and the build takes twice as long.",
        ),
    ],
    "deps": [
        (
            "procedural",
            "Dependencies are managed with <pkg>; always commit <lockfile> together with the manifest change.",
        ),
        ("fact", "<bot> opens dependency upgrade PRs weekly for <name>; minor bumps auto-merge when CI is green."),
        ("decision", "Major <fw> upgrades get their own branch and a read of the changelog before merging."),
        ("procedural", "Before adding a package to <name>, check its licence and maintenance, then add it with <pkg>."),
    ],
    "config": [
        ("fact", "Local config lives in <env_file>; production secrets are stored in <secrets> and never committed."),
        (
            "procedural",
            "A new config key goes into the example env file, the settings schema and <secrets> in the same PR.",
        ),
        (
            "decision",
            "Config is read once at startup into a typed settings object in <name>; no env lookups deep in the code.",
        ),
        (
            "fact",
            "Feature flags in <name> are plain config keys with a default; remove a flag within two sprints of rollout.",
        ),
    ],
}
LESSONS = {
    "deploy": [
        "The <target> deploy failed with a [health-check timeout|crash loop|502 from the edge]; a config key was missing from <secrets>.",
        "After a deploy to <target>, the first requests are slow until the cache warms; hit the full health endpoint once.",
        "A release via <deploy_tool> hung because the previous rollout was still running; wait for it or cancel it explicitly.",
        "Deploy checklist for <name>: migrations reviewed, changelog updated, CI green on the exact commit, then <deploy_tool>.",
        "The old version stays around for [10|15|30] minutes after a deploy; roll back within that window with <rollback>.",
        "A deploy of <name> broke because the build base image moved; pin the base image by digest, not by tag.",
    ],
    "migrations": [
        "A migration on <table> locked the table for [40 s|2 minutes|5 minutes] in production; big index builds need their own migration.",
        "Two branches both added migrations touching <table>; regenerate the later one instead of editing applied files.",
        "Backfills of <table> run in batches of [500|1000|5000] rows with a short sleep, otherwise the database falls behind.",
        "<orm> missed a renamed column on <table>; always read a generated migration before committing it.",
        "Down-migrations never run in production for <name>; write them for local resets but don't rely on them.",
        "A data migration for <table> timed out in the release step; long data fixes go into a one-off job instead.",
    ],
    "tests": [
        "A flaky test in the <table> suite was a timezone bug: freeze time in UTC, the CI runners are UTC.",
        "The test database is reused between runs; after changing a migration run `<test_cmd>` against a fresh database.",
        "The suite re-created the schema per test; a session-wide fixture cut it from [8|11|14] to [3|4] minutes.",
        "Hand-written mocks of the <auth> client drifted from reality; record fixtures from staging instead.",
        "Parallel runs of `<test_cmd>` collided on a shared temp directory; every worker now gets its own.",
        "Coverage gate is [80|85|90] % of changed lines in <ci>; untested error paths in <table> handlers usually fail it.",
    ],
    "auth": [
        "Login broke after the <auth> key rotation; refresh the cached signing keys when a token has an unknown key id.",
        "Users of <name> were logged out at random: the session cookie lacked SameSite=Lax. Fixed in the auth middleware.",
        "Return 401 for a missing or expired token and 403 for a valid user without the role; <name> clients depend on it.",
        "The <auth> sandbox rate-limits token requests to [10|20|60] a minute; reuse tokens in integration tests.",
        "Password-reset links expire after [15|30|60] minutes in <name>; the email template states it, keep both in sync.",
        "Admin impersonation must write an audit entry with both user ids for <table>; security review asked for it.",
    ],
    "logging": [
        "Log volume in <log_sink> doubled because debug logging was on in production; check the level after config changes.",
        "Request ids got lost in background jobs; pass request_id in the job payload and bind it in <log_lib>.",
        "Stack traces arrived in <log_sink> as separate lines; log exceptions as one JSON field instead.",
        "Health-check requests are excluded from the access logs of <name>; they were [40|60|70] % of the volume.",
        "Slow queries over [200|500] ms are logged; look there first when the <table> endpoints get slow.",
        "Only [1|5|10] % of successful requests are logged at info level in <name>; errors are always kept.",
    ],
    "ci": [
        "The build failed in <ci> because the cache restored a stale install; bump the cache key suffix in <ci_file>.",
        "Lint and type check run before tests in <ci_file>; run them locally first, they break the build most often.",
        "CI ran out of disk space during the image build of <name>; prune old images in the job before building.",
        "A CI step failed only for forked PRs because secrets are not exposed to them; guard it with a condition in <ci_file>.",
        "The <ci> pipeline reinstalled tools on every run; they are now cached keyed on the <lockfile> hash.",
        "Nightly CI for <name> runs the slow tests and the dependency audit; failures go to [the morning triage|the weekly review].",
    ],
    "deps": [
        "Upgrading <fw> broke [request validation|the middleware order|date parsing]; read the migration guide before major bumps.",
        "A transitive dependency pulled in a vulnerable version; it is pinned with a <pkg> override until upstream fixes it.",
        "<bot> PRs for <name> are grouped weekly; merging them one by one re-runs CI for every PR.",
        "<lockfile> had merge conflicts; regenerate it with <pkg> instead of resolving the conflict by hand.",
        "Removed an unused HTTP client library from <name>; fewer dependencies means fewer upgrade PRs to review.",
        "The licence check flagged an AGPL package; anything non-permissive needs approval before it goes into <name>.",
    ],
    "config": [
        "A missing config key crashed <name> at startup; CI now fails when the example env file lacks a schema key.",
        "Staging and production settings drifted; diff the <secrets> entries before every release.",
        "Outbound HTTP timeouts of <name> are set per environment: staging [5|10] s, production [3|5] s.",
        "Renamed env vars get a transition release that reads both names; remove the old name after that.",
        "The settings refactor split config into base, dev and prod layers in <name>; overrides go only in the env layer.",
        "<name> validates its config at startup and exits with a message listing every missing key.",
    ],
}
# Facts that change: kind -> (topic, type, template with <v>); per project: kind -> successive values.
VOLATILE = {
    "db": (
        "migrations",
        "fact",
        "Production runs <v>; keep the local docker-compose database on the same major version.",
    ),
    "runtime": (
        "deps",
        "fact",
        "The runtime is pinned to <v> in CI and in the repo version file; bump both in the same PR.",
    ),
    "staging": ("deploy", "fact", "Staging is at <v> and redeploys from main on every merge."),
    "release": (
        "deploy",
        "procedural",
        "Release procedure: tag the commit, then run `<v>`; it waits for health checks before switching traffic.",
    ),
    "runner": ("ci", "fact", "CI jobs run on the <v> runner image; jobs that build images use the larger runner."),
    "token": ("auth", "fact", "Access tokens live <v>; refresh tokens rotate on every use and are revoked on logout."),
    "retention": ("logging", "fact", "Log retention is <v>; older logs go to cold storage and take a day to restore."),
    "settings": ("config", "procedural", "To change a production setting: <v>."),
}
VOLATILE_VALUES = {
    OLD_MAIN: {
        "db": ["PostgreSQL 14.10", "PostgreSQL 15.5", "PostgreSQL 16.2"],
        "runtime": ["Python 3.11", "Python 3.12"],
        "staging": ["https://staging.acme-api.dev", "https://acme-api-staging.fly.dev"],
        "release": ["make release", "make release ENV=prod", "just release prod"],
        "token": ["15 minutes", "5 minutes"],
        "retention": ["15 days in Datadog", "30 days in Datadog"],
    },
    SECOND: {
        "db": ["PostgreSQL 13 on RDS", "PostgreSQL 15 on RDS", "Aurora PostgreSQL 15"],
        "runtime": ["Go 1.21", "Go 1.22"],
        "runner": ["ubuntu-22.04", "ubuntu-24.04"],
        "staging": ["ledger.staging.internal:8443", "https://ledger.stg.corp.example"],
        "settings": [
            "edit the Helm values in the infra repo and let Argo CD sync",
            "edit the Kustomize overlay in the infra repo and let Argo CD sync",
        ],
        "token": ["10 minutes", "30 minutes"],
    },
    SIDE: {
        "runtime": ["Node 18", "Node 20", "Node 22"],
        "release": ["pnpm run deploy", "wrangler deploy --env production"],
        "runner": ["ubuntu-latest", "ubuntu-24.04"],
        "staging": ["https://tidepool-preview.pages.dev", "https://preview.tidepool.app"],
        "retention": ["7 days in Sentry", "30 days in Sentry"],
    },
    NEW_MAIN: {
        "db": ["PostgreSQL 15 on RDS (orbit-prod)", "PostgreSQL 16 on RDS (orbit-prod)"],
        "runtime": ["Python 3.12", "Python 3.13"],
        "release": ["make deploy-prod", "make deploy-prod APPROVE=1"],
        "staging": ["https://orbit-staging.internal", "https://staging.orbit.example.com"],
        "retention": ["30 days in Honeycomb", "60 days in Honeycomb"],
        "token": ["1 hour", "15 minutes"],
        "settings": [
            "update the SSM parameter and restart the ECS service",
            "update the SSM parameter; the service reloads it within a minute",
        ],
    },
}
# (type, topic or None, about or None, content); the first four are the always-useful ones.
PREFS = [
    (
        "preference",
        None,
        None,
        "I prefer small, focused commits with imperative subject lines; never mix a refactor with a behaviour change.",
    ),
    (
        "preference",
        None,
        None,
        "Type hints on every public function, functions under ~40 lines, early returns instead of nested ifs.",
    ),
    (
        "preference",
        None,
        None,
        "Before fixing a bug, reproduce it with a failing test first, then make that test pass.",
    ),
    (
        "preference",
        None,
        None,
        "Explain the plan in 3-5 bullet points before editing more than two files, and wait for my go.",
    ),
    (
        "preference",
        "logging",
        None,
        "I like structured logs with a request_id on every line; no print debugging left in commits.",
    ),
    (
        "preference",
        "deps",
        None,
        "Pin direct dependencies exactly and let the bot open upgrade PRs; never upgrade during a release week.",
    ),
    (
        "preference",
        "deploy",
        None,
        "Prefer feature flags over long-lived branches for anything that takes more than two days.",
    ),
    (
        "preference",
        "migrations",
        None,
        "Name migrations after the change (add_invoice_status), not after the ticket number.",
    ),
    ("preference", "tests", None, "Prefer parametrized, table-driven test cases over copy-pasted test functions."),
    (
        "preference",
        "config",
        None,
        "Secrets never go into committed files, not even examples; inject them from the password manager CLI.",
    ),
    (
        "preference",
        None,
        SIDE,
        "tidepool is a hobby project: favour the simplest thing and add no dependency without a strong reason.",
    ),
    (
        "preference",
        None,
        SECOND,
        "In ledger reviews the team wants errors wrapped with %w and context; never a bare return err.",
    ),
    (
        "preference",
        None,
        NEW_MAIN,
        "orbit-web reviewers expect a short ADR in docs/adr for any new dependency or service.",
    ),
]
CORE_PREF_WEIGHTS = (0.4, 0.3, 0.2, 0.1)  # choice among the first four when one is relevant
# (topic or None, stack tag or None, content): project-independent notes.
GENERAL = [
    (
        "tests",
        None,
        "git bisect run with the test command finds the commit that broke a test; mark one good and one bad commit first.",
    ),
    (
        "tests",
        "python",
        "For flaky pytest tests, rerun with -p no:randomly and a fixed seed before assuming a race condition.",
    ),
    (
        "tests",
        None,
        "When a test passes alone but fails in the suite, look for shared global state or leftover files first.",
    ),
    (
        "migrations",
        "postgres",
        "Postgres: CREATE INDEX CONCURRENTLY cannot run inside a transaction; it needs a migration of its own.",
    ),
    (
        "migrations",
        "postgres",
        "Adding a column with a volatile default rewrites the whole Postgres table; add it nullable and backfill.",
    ),
    ("migrations", None, "Never edit a migration that already ran anywhere shared; write a new one that fixes it."),
    ("ci", "docker", "Docker layer cache: copy the lockfile and install dependencies before copying the source tree."),
    (
        "ci",
        None,
        "Re-running a red CI job without reading the log hides flaky tests; note the failing test name first.",
    ),
    ("deploy", None, "When a deploy hangs at health checks, verify the readiness path and port before anything else."),
    (
        "deploy",
        "docker",
        "Containers get SIGTERM on shutdown; handle it and drain in-flight requests or deploys drop connections.",
    ),
    ("auth", None, "JWT validation should allow 30-60 s of clock skew on exp and nbf; server clocks drift."),
    ("auth", None, "Never log full Authorization headers; log the token's last four characters at most."),
    ("logging", None, "Log at the boundary where an error is handled, not at every layer it passes through."),
    ("logging", None, "Correlate logs and traces by putting the trace id into every log line."),
    ("deps", "node", "pnpm why <package> shows which dependency pulls in a transitive package."),
    ("deps", "go", "go mod why -m shows why a module is in the build; go mod tidy drops the unused ones."),
    ("deps", "python", "uv pip compile and pip-tools both write hashes; keep hash checking on in CI installs."),
    (
        "config",
        None,
        "Twelve-factor style: config comes from the environment, with defaults only for local development.",
    ),
    ("config", None, "Validate config at startup, fail fast with every missing key listed, not one at a time."),
    (None, None, "Team standup is at 9:45 on weekdays; Friday afternoons are for demos and no deploys."),
    (None, None, "My laptop's Docker Desktop needs at least 8 GB of memory or the integration stack gets OOM-killed."),
    (
        None,
        None,
        "Use the conventional commits prefixes feat, fix, chore and docs in commit subjects for the changelog tooling.",
    ),
    (None, None, "Useful shell alias: gpr opens the current branch's pull request in the browser via the gh CLI."),
    (
        None,
        None,
        "Take a break every 90 minutes; long evening sessions after 23:00 produce the bugs I fix next morning.",
    ),
]
GENERAL_TAG = {text: tag for _t, tag, text in GENERAL}
N_GENERAL_AT_START = 16  # the rest are written later, one now and then
TASKS = {
    "deploy": [
        "the release via <deploy_tool> rolled back on <target>, find out why",
        "ship the <table> changes to <target> and watch the rollout",
    ],
    "migrations": [
        "write a <orm> migration adding a status column to <table>",
        "the backfill of <table> is too slow, batch it",
    ],
    "tests": [
        "the <table> tests fail in CI but pass locally with `<test_cmd>`",
        "add <test_tool> tests for the <table> export",
    ],
    "auth": [
        "add a role check to the <table> admin endpoints using <auth>",
        "token refresh against <auth> fails after an hour",
    ],
    "logging": [
        "add request_id to the <log_lib> output of the <table> endpoints",
        "errors in <log_sink> have no stack traces",
    ],
    "ci": ["<ci> is red on main after the <lockfile> change", "speed up <ci_file>, the pipeline takes too long"],
    "deps": [
        "upgrade <fw> to the next major and fix the breakages",
        "a <bot> PR breaks the build, look at the <lockfile> diff",
    ],
    "config": [
        "move the remaining settings out of <env_file> into the typed config",
        "add a secret to <secrets> for the <table> export job",
    ],
}
VAGUE = {
    "deploy": [
        "the deploy failed again, can you look at it?",
        "continue with the deploy fix",
        "let's get the release out today",
    ],
    "migrations": [
        "continue with the migration",
        "the migration is failing, take a look",
        "finish the backfill we started",
    ],
    "tests": ["fix the flaky test", "continue with the tests", "the test suite is slow again, any ideas?"],
    "auth": ["continue with the auth changes", "login is broken again", "the token refresh still fails sometimes"],
    "logging": [
        "the logs are too noisy, clean them up",
        "continue with the logging work",
        "I can't find the request in the logs",
    ],
    "ci": ["fix the failing build", "CI is red again", "continue speeding up the CI pipeline"],
    "deps": ["continue with the dependency upgrade", "bump the dependencies", "the upgrade broke something, check it"],
    "config": [
        "continue with the refactor",
        "continue with the config refactor",
        "add the new setting we talked about",
    ],
}
NEXT = ["open a PR", "write tests for it", "deploy to staging and verify", "update the docs"]
OPEN = ["left open", "next step", "still to do"]
# Session slots: (name, weekday probability, weekend probability, start hour, end hour)
SLOTS = [("morning", 0.85, 0.05, 8.5, 11.75), ("afternoon", 0.7, 0.2, 13.0, 17.5), ("evening", 0.3, 0.35, 19.5, 23.0)]
# P(project | slot) before and after ``change_at`` (the new main project also eats afternoons).
HABITS = {
    "morning": {OLD_MAIN: 0.75, SECOND: 0.2, SIDE: 0.05},
    "afternoon": {OLD_MAIN: 0.42, SECOND: 0.5, SIDE: 0.08},
    "evening": {SIDE: 0.8, OLD_MAIN: 0.12, SECOND: 0.08},
    "weekend": {SIDE: 0.85, OLD_MAIN: 0.1, SECOND: 0.05},
}
HABITS_AFTER = {
    "morning": {NEW_MAIN: 0.72, SECOND: 0.18, OLD_MAIN: 0.06, SIDE: 0.04},
    "afternoon": {NEW_MAIN: 0.5, SECOND: 0.42, OLD_MAIN: 0.03, SIDE: 0.05},
    "evening": {SIDE: 0.8, NEW_MAIN: 0.12, SECOND: 0.06, OLD_MAIN: 0.02},
    "weekend": {SIDE: 0.85, NEW_MAIN: 0.1, SECOND: 0.04, OLD_MAIN: 0.01},
}
TOPIC_BIAS = {
    "morning": {"deploy": 3, "ci": 3, "logging": 2.5, "migrations": 2},
    "afternoon": {"auth": 3, "tests": 2.5, "config": 2, "migrations": 1.5},
    "evening": {"deps": 2.5, "tests": 2},
    "weekend": {"deps": 2.5, "tests": 2},
}
