"""The Safe tier's secret detector: every kind it covers, what it must leave alone, redaction."""

from __future__ import annotations

import base64
import json
import random
import string
import subprocess
import sys
from pathlib import Path

import pytest

from rag_assets.privacy.secrets import (
    Redaction,
    SecretDetector,
    SecretFinding,
    masked_preview,
)
from rag_assets.privacy.secrets.detector import merge

CASES_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "corpora" / "secrets"

# Made-up values, generated here so no real-looking credential is written down twice.
_RNG = random.Random(20260801)
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def tok(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def pem(label: str, lines: int = 6) -> str:
    body = "\n".join(tok(64, B64) for _ in range(lines)) + "\n" + tok(20, B64) + "=="
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


def make_iban(country: str, bban: str) -> str:
    """A checksum-valid IBAN for a made-up account number (ISO 13616 mod-97)."""
    digits = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{country}{98 - int(digits) % 97:02d}{bban}"


def b64url(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


PW = "Kx9" + tok(9) + "!q"  # a password-shaped value
IBAN_DE = make_iban("DE", tok(18, string.digits))
IBAN_DE_GROUPED = " ".join(IBAN_DE[i : i + 4] for i in range(0, len(IBAN_DE), 4))
IBAN_GB = make_iban("GB", "NWBK" + tok(14, string.digits))
KEY_ID = "AKIA" + tok(16, string.ascii_uppercase + "234567")
SLACK_ID = string.ascii_uppercase + string.digits
JWT = f"{b64url({'alg': 'HS256', 'typ': 'JWT'})}.{b64url({'sub': '1234567890', 'name': 'Jane'})}.{tok(43, URLSAFE)}"
BASIC = base64.b64encode(f"deploy:{PW}".encode()).decode()

# (text, the secret that must disappear, the expected kind)
POSITIVES: list[tuple[str, str, str]] = [
    # cloud
    (f"aws_access_key_id = {(k := 'AKIA' + tok(16, string.ascii_uppercase + '234567'))}", k, "aws_access_key_id"),
    (f"aws_secret_access_key = {(k := tok(40, B64))}", k, "aws_secret_access_key"),
    (f"User,Access key ID,Secret access key\nci,{KEY_ID},{(k := tok(40, B64))}", k, "aws_secret_access_key"),
    (f"GOOGLE_MAPS = '{(k := 'AIza' + tok(35, URLSAFE))}'", k, "google_api_key"),
    (
        f"DefaultEndpointsProtocol=https;AccountName=notes;AccountKey={(k := tok(86, B64) + '==')};"
        "EndpointSuffix=core.windows.net",
        k,
        "azure_storage_connection_string",
    ),
    (
        f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={(k := tok(43, B64) + '=')}",
        k,
        "azure_connection_string",
    ),
    (f"client secret: {(k := tok(3) + '8Q~' + tok(34, ALNUM + '_~.-'))}", k, "azure_ad_client_secret"),
    (
        f"Endpoint=https://notes.azconfig.io;Id=Ab1c-l0-s0:{tok(20)};Secret={(k := tok(44, B64))}",
        k,
        "azure_app_config_connection_string",
    ),
    # code hosting
    (f"token {(k := 'ghp_' + tok(36))} for CI", k, "github_pat_classic"),
    (f"GH_TOKEN={(k := 'github_pat_' + tok(22) + '_' + tok(59))}", k, "github_pat_fine_grained"),
    (f"oauth: {(k := 'gho_' + tok(36))}", k, "github_token_other"),
    (f"app token {(k := 'ghs_' + tok(36))}", k, "github_token_other"),
    (f"user-to-server {(k := 'ghu_' + tok(36))}", k, "github_token_other"),
    (f"refresh {(k := 'ghr_' + tok(36))}", k, "github_token_other"),
    (f"export GITLAB_TOKEN={(k := 'glpat-' + tok(20, URLSAFE))}", k, "gitlab_pat"),
    (f"deploy token {(k := 'gldt-' + tok(20, URLSAFE))}", k, "gitlab_token_other"),
    (f"runner: {(k := 'glrt-' + tok(20, URLSAFE))}", k, "gitlab_token_other"),
    (f"registration {(k := 'GR1348941' + tok(20, URLSAFE))}", k, "gitlab_token_other"),
    # chat
    (f"SLACK_BOT={(k := f'xoxb-{tok(11, string.digits)}-{tok(13, string.digits)}-{tok(24)}')}", k, "slack_bot_token"),
    (
        f"user token {(k := 'xoxp-' + '-'.join(tok(12, string.digits) for _ in range(3)) + '-' + tok(32, HEX))}",
        k,
        "slack_user_token",
    ),
    (f"legacy {(k := 'xoxa-2-' + tok(12, string.digits) + '-' + tok(24))}", k, "slack_token_other"),
    (f"refresh {(k := 'xoxe-1-' + tok(146, string.ascii_uppercase + string.digits))}", k, "slack_token_other"),
    (f"config {(k := 'xoxe.xoxp-1-' + tok(164))}", k, "slack_user_token"),
    (
        f"post to {(k := f'https://hooks.slack.com/services/T{tok(8, SLACK_ID)}/B{tok(10, SLACK_ID)}/{tok(24)}')}",
        k,
        "slack_webhook",
    ),
    (f"bot token {(k := tok(9, '123456789') + ':AA' + tok(33, URLSAFE))}", k, "telegram_bot_token"),
    # payments, AI, SaaS
    (f"stripe.api_key = '{(k := 'sk_live_' + tok(24))}'", k, "stripe_secret_key"),
    (f"restricted {(k := 'rk_live_' + tok(24))}", k, "stripe_secret_key"),
    (f"test mode key {(k := 'sk_test_' + tok(24))}", k, "stripe_secret_key"),
    (f"OPENAI_API_KEY={(k := 'sk-' + tok(20) + 'T3BlbkFJ' + tok(20))}", k, "openai_api_key"),
    (f"key: {(k := 'sk-proj-' + tok(120, URLSAFE))}", k, "openai_api_key"),
    (f"openrouter {(k := 'sk-or-v1-' + tok(64, HEX))}", k, "openrouter_api_key"),
    (f"HF_TOKEN={(k := 'hf_' + tok(34, string.ascii_letters))}", k, "huggingface_token"),
    (f"//registry.npmjs.org/:_authToken={(k := 'npm_' + tok(36))}", k, "npm_token"),
    (f"SENDGRID = {(k := 'SG.' + tok(22, URLSAFE) + '.' + tok(43, URLSAFE))}", k, "sendgrid"),
    (f"twilio api key {(k := 'SK' + tok(32, HEX))}", k, "twilio"),
    (f"account {(k := 'AC' + tok(32, HEX))}", k, "twilio"),
    (f"TWILIO_AUTH_TOKEN={(k := tok(32, HEX))}", k, "generic_secret"),
    # keys and structured credentials
    *[
        (f"key:\n{(k := pem(label))}\n", k, "private_key")
        for label in (
            "RSA PRIVATE KEY",
            "EC PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
            "DSA PRIVATE KEY",
            "PGP PRIVATE KEY BLOCK",
        )
    ],
    (
        f'{{"private_key": "-----BEGIN PRIVATE KEY-----\\n{(k := tok(64, B64))}\\n{tok(64, B64)}\\n'
        '-----END PRIVATE KEY-----\\n"}',
        k,
        "private_key",
    ),
    (f"jwt: {JWT}", JWT, "jwt"),
    (f"DATABASE_URL=postgres://app:{PW}@db.internal:5432/notes", PW, "postgres_uri"),
    (f"mysql://root:{PW}@localhost:3306/wiki", PW, "mysql_uri"),
    (f"mongodb://admin:{PW}@mongo1,mongo2/?replicaSet=rs0", PW, "mongodb_uri"),
    (f"mongodb+srv://reader:{PW}@cluster0.ab1cd.mongodb.net/test", PW, "mongodb_uri"),
    (
        f"Server=tcp:sql.example.net,1433;Database=notes;User ID=admin;Password={PW};Encrypt=true;",
        PW,
        "sqlserver_connection_string",
    ),
    (f"Driver={{ODBC Driver 18 for SQL Server}};Server=db;Uid=sa;Pwd={PW};", PW, "sqlserver_connection_string"),
    (f"git clone https://deploy:{PW}@git.example.com/team/repo.git", PW, "basic_auth_url"),
    (f"curl -u admin:{PW} https://api.example.com/v1/items", PW, "basic_auth_curl"),
    (f"curl -s \\\n  --user 'ci:{PW}' \\\n  https://api.example.com", PW, "basic_auth_curl"),
    (f"Authorization: Basic {BASIC}", BASIC, "basic_auth_header"),
    (f"-H 'Authorization: Bearer {(k := tok(40, URLSAFE))}'", k, "bearer_token"),
    # generic assignments: prose, YAML, JSON, INI, TOML, .env
    ("The password is hunter2, don't tell anyone.", "hunter2", "generic_password"),
    (f"my wifi password for the flat is {PW}", PW, "generic_password"),
    ("database:\n  user: app\n  password: s3cr3t-Value!\n", "s3cr3t-Value!", "generic_password"),
    (f'{{"user": "app", "passwd": "{PW}"}}', PW, "generic_password"),
    (f"[database]\npassword = {PW}\n", PW, "generic_password"),
    (f'[auth]\ntoken = "{(k := tok(40))}"\n', k, "generic_secret"),
    (f"DB_PASSWORD={PW}\n", PW, "generic_password"),
    (f"export API_KEY={(k := tok(32))}\n", k, "generic_api_key"),
    (f"client_secret: {(k := tok(32, URLSAFE))}", k, "generic_secret"),
    (f"SECRET_KEY = '{(k := tok(50, HEX))}'", k, "generic_secret"),
    (f"STRIPE_KEY={(k := tok(30))}", k, "generic_api_key"),
    (f'<add key="DbPassword" value="x"/>\n<password>{PW}</password>', PW, "generic_password"),
    (f"machine api.example.com login bot password {PW}", PW, "generic_password"),
    (f"CREATE USER app IDENTIFIED BY '{PW}';", PW, "generic_password"),
    (f'new NetworkCredential("svc", "{PW}")', PW, "generic_password"),
    ("the online banking PIN is 4711, the card PIN is elsewhere", "4711", "generic_password"),
    (f"The iDRAC password is {(k := 'Zq4-' + tok(4) + '-' + tok(4))} and the user is root.", k, "generic_password"),
    (f"[Interface]\nPrivateKey = {(k := tok(43, B64) + '=')}\nAddress = 10.9.0.2/32", k, "generic_secret"),
    (
        "the recovery code disables two-step login once:\n\n`HQ4C-8FW2-GS9M-04B5-WBV1-OE5V-XD7A-8942`",
        "HQ4C-8FW2-GS9M-04B5-WBV1-OE5V-XD7A-8942",
        "recovery_code",
    ),
    (f"Joint account IBAN {IBAN_DE_GROUPED} at the local bank", IBAN_DE_GROUPED, "iban"),
    (f"IBAN: {IBAN_GB}", IBAN_GB, "iban"),
    # e-mail
    ("Write to jane.doe@example.org for access.", "jane.doe@example.org", "email"),
    ("[mail me](mailto:jane@example.org)", "jane@example.org", "email"),
    # A remote command on the line does not excuse an address in prose after it.
    ("For ssh access, write to admin@corp.example.org", "admin@corp.example.org", "email"),
    ("git config user.email dev@corp.example.org", "dev@corp.example.org", "email"),
    ("mytool --email ops@corp.example.org", "ops@corp.example.org", "email"),
]

# Must produce no finding at all.
NEGATIVES: list[str] = [
    # placeholders
    "password: <password>",
    "api_key: your-api-key-here",
    "token: xxxxxxxx",
    "password: changeme",
    "password: ****",
    "api_key = example",
    "AWS key AKIAXXXXXXXXXXXXXXXX",
    "GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "GITLAB=glpat-XXXXXXXXXXXXXXXXXXXX",
    "postgres://user:password@localhost:5432/db",
    "postgres://app:<password>@db:5432/app",
    "curl -u user:<password> https://example.com",
    "Authorization: Bearer <token>",
    "Authorization: Bearer YOUR_ACCESS_TOKEN",
    "-----BEGIN RSA PRIVATE KEY-----\n...\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----\n" + "x" * 64 + "\n-----END PRIVATE KEY-----",
    # environment and template references
    "password: ${DB_PASSWORD}",
    "password=$DB_PASSWORD",
    "set PASSWORD=%DB_PASSWORD%",
    "password: $(pass show db/prod)",
    "token: {{ secret }}",
    'token: "{{ .Site.Params.token }}"',
    "DATABASE_URL=postgres://app:${DB_PASSWORD}@db:5432/app",
    "curl -u $USER:$PASS https://example.com",
    "Authorization: Bearer $TOKEN",
    "//registry.npmjs.org/:_authToken=${NPM_TOKEN}",
    "password = get_password()",
    "secret = settings.SECRET_KEY",
    # hashes, ids, digests, public keys
    f"sha256sum: {tok(64, HEX)}",
    f"md5 {tok(32, HEX)}  file.tar.gz",
    f"commit {tok(40, HEX)}",
    f"git checkout {tok(7, HEX)}",
    f"image: nginx@sha256:{tok(64, HEX)}",
    f'<script integrity="sha384-{tok(64, B64)}" src="x.js">',
    "id: 123e4567-e89b-12d3-a456-426614174000",
    "client_id = 123e4567-e89b-12d3-a456-426614174000",
    "request 9f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f failed",
    f"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ{tok(300, B64)} jane@laptop",
    f"public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{tok(43, B64)}",
    pem("PUBLIC KEY"),
    pem("PGP PUBLIC KEY BLOCK"),
    pem("CERTIFICATE"),
    f"stripe publishable pk_live_{tok(24)}",
    # prose and code that only mention secrets
    "The password is stored in the vault and rotated monthly.",
    "Password: must be at least 12 characters long",
    "Set the `password` field to the password of the database user.",
    "Use --password-stdin to read the password from standard input.",
    "The token expires after 24 hours.",
    "max_tokens: 1000",
    "def connect(password: str, token: Optional[str] = None): ...",
    "if password == user_input:",
    "rclone config create sftp --sftp-ask-password public/ :sftp:www/",
    "git clone git@github.com:example/notes.git",
    "mosquitto_passwd -c /etc/mosquitto/passwd zigbee2mqtt",
    "  password: !secret mqtt_password",
    "- Fix source directory binding using `Dir.pwd` ([#75](https://example.com/75))",
    "| :safety_pin: | `:safety_pin:` | :broom: | `:broom:` |",
    "GPIO pin: 17",
    "pin: 1.4.2",
    f"PublicKey = {tok(43, B64)}=",
    "sudo wg genkey | tee /etc/wireguard/server.key | wg pubkey > server.pub",
    "UUID 123E4567-E89B-12D3-A456-426614174000 in upper case",
    "ISO-8859-1, UTF-16LE and WINDOWS-1252-BEST-FIT",
    f"IBAN {IBAN_DE[:2]}{(int(IBAN_DE[2:4]) + 1) % 100:02d}{IBAN_DE[4:]} (checksum does not match)",
    "![logo](images/logo@2x.png)",
    "Hugo v0.121.0 (github.com/gohugoio/hugo@v0.121.0)",
    # user@host as a command's destination, not a mailbox (issue 26)
    "nixos-rebuild switch --flake .#dns1 --target-host root@dns1.home.arpa",
    "ssh -p 2222 -i ~/.ssh/id_ed25519 root@nas.lan",
    "rsync -av ./backups/ me@backup.example.net:/srv/backups",
    "ssh -J admin@bastion.lan root@inner.lan",
    "deploy --build-host=builder@ci.lan",
]


@pytest.fixture(scope="module")
def detector() -> SecretDetector:
    return SecretDetector()


@pytest.mark.parametrize("text,secret,kind", POSITIVES, ids=[f"{k}-{i}" for i, (_, _, k) in enumerate(POSITIVES)])
def test_every_kind_is_found_and_redacted(detector: SecretDetector, text: str, secret: str, kind: str) -> None:
    assert secret in text
    redaction = detector.redact(text)
    assert secret not in redaction.text
    assert f"[REDACTED:{kind}]" in redaction.text
    assert redaction.counts.get(kind, 0) >= 1


@pytest.mark.parametrize("text", NEGATIVES)
def test_not_secrets_stay_clean(detector: SecretDetector, text: str) -> None:
    assert detector.find(text) == [], [text[f.start : f.end] for f in detector.find(text)]


def test_detector_does_not_import_detect_secrets() -> None:
    # Its two plugins the rules used are ported into rules.toml; the library is not used.
    code = "import sys, rag_assets.privacy.secrets as s; s.SecretDetector().find('x'); print('detect_secrets' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_uri_redacts_only_the_password(detector: SecretDetector) -> None:
    text = f"postgres://app:{PW}@db.internal:5432/notes"
    [finding] = detector.find(text)
    assert text[finding.start : finding.end] == PW
    assert detector.redact(text).text == "postgres://app:[REDACTED:postgres_uri]@db.internal:5432/notes"


def test_redact_replaces_each_span_and_counts_kinds(detector: SecretDetector) -> None:
    gh = "ghp_" + tok(36)
    text = f"a {gh} b jane@example.org c bob@example.net"
    result = detector.redact(text)
    assert isinstance(result, Redaction)
    assert result.text == "a [REDACTED:github_pat_classic] b [REDACTED:email] c [REDACTED:email]"
    assert result.counts == {"github_pat_classic": 1, "email": 2}


def test_clean_text_is_returned_unchanged(detector: SecretDetector) -> None:
    text = "Nothing to see here: just notes about VLANs."
    result = detector.redact(text)
    assert result.text is text or result.text == text
    assert result.counts == {}
    assert detector.find("") == []


def test_findings_are_sorted_and_do_not_overlap(detector: SecretDetector) -> None:
    text = "\n".join(t for t, _, _ in POSITIVES)
    findings = detector.find(text)
    assert findings == sorted(findings, key=lambda f: f.start)
    for a, b in zip(findings, findings[1:], strict=False):
        assert a.end <= b.start


def test_overlapping_findings_merge_and_keep_the_more_specific_kind(detector: SecretDetector) -> None:
    # The generic "api_key = ..." rule and the Stripe rule both match the value: one finding.
    key = "sk_live_" + tok(24)
    [finding] = detector.find(f"api_key = '{key}'")
    assert finding.kind == "stripe_secret_key"
    # A JWT sent as a bearer token is reported as the JWT.
    [finding] = detector.find(f"Authorization: Bearer {JWT}")
    assert finding.kind == "jwt"
    # Partial overlaps merge into the union of the spans.
    raw = [
        (0, 10, "generic_secret", "rule:a", 10),
        (5, 20, "github_pat_classic", "rule:b", 40),
        (25, 30, "email", "rule:c", 20),
    ]
    merged = merge(raw)
    assert merged == [SecretFinding("github_pat_classic", 0, 20, "rule:b"), SecretFinding("email", 25, 30, "rule:c")]


def test_redaction_is_idempotent(detector: SecretDetector) -> None:
    for text, _, _ in POSITIVES:
        once = detector.redact(text).text
        assert detector.find(once) == [], once
        assert detector.redact(once).text == once


@pytest.mark.parametrize("text,secret,kind", POSITIVES)
def test_masked_preview_never_shows_the_secret(detector: SecretDetector, text: str, secret: str, kind: str) -> None:
    for finding in detector.find(text):
        preview = masked_preview(text, finding)
        value = text[finding.start : finding.end]
        assert value not in preview
        assert secret not in preview
        assert "\n" not in preview
        assert f"[{len(value)} chars]" in preview


def test_masked_preview_shape() -> None:
    key = "AKIA" + tok(16, string.ascii_uppercase)
    text = f"the key {key} is here"
    finding = SecretFinding("aws_access_key_id", 8, 8 + len(key), "test")
    assert masked_preview(text, finding) == "the key AK\u2026[20 chars] is here"
    # A repeated secret in the context is masked too.
    text = f"{PW} and again {PW}"
    preview = masked_preview(text, SecretFinding("generic_password", 0, len(PW), "test"), context=100)
    assert PW not in preview


def test_detector_is_reusable_and_deterministic(detector: SecretDetector) -> None:
    text = POSITIVES[0][0]
    assert detector.find(text) == detector.find(text) == SecretDetector().find(text)


def test_rules_ported_from_detect_secrets_find_discord_and_artifactory(detector: SecretDetector) -> None:
    discord = f"M{tok(23)}.{tok(6)}.{tok(27)}"
    artifactory = "AKCp" + tok(69)
    text = f"bot: {discord}\nartifactory: {artifactory}\n"
    findings = detector.find(text)
    assert [(text[f.start : f.end], f.kind) for f in findings] == [
        (discord, "discord_bot_token"),
        (artifactory, "artifactory_token"),
    ]
    assert {f.rule for f in findings} == {"rule:discord_bot_token", "rule:artifactory_api_token"}


def test_ported_rules_keep_detect_secrets_filters(detector: SecretDetector) -> None:
    artifactory = "AKCp" + tok(69)
    # Its indirect-reference filter: a value on a line that reads "x = call(...)".
    assert detector.find(f"key = lookup({artifactory})") == []
    # Its delimiters: a token glued to the previous one after one space is not matched.
    assert len(detector.find(f"{artifactory} {artifactory}")) == 1


@pytest.mark.skipif(
    not (CASES_DIR / "cases.jsonl").is_file(), reason="the shared corpus ../shared/corpora/secrets is absent"
)
def test_held_out_corpus_recall_and_false_positive_rate(detector: SecretDetector) -> None:
    lines = (CASES_DIR / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    cases = [json.loads(line) for line in lines if line.strip()]
    flags = [c for c in cases if c["expect"] == "flag"]
    cleans = [c for c in cases if c["expect"] == "clean"]
    detected = sum(c["secret"] not in detector.redact(c["text"]).text for c in flags)
    false_positives = sum(bool(detector.find(c["text"])) for c in cleans)
    assert detected / len(flags) >= 0.95
    assert false_positives / len(cleans) <= 0.05
