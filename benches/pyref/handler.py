"""The Python reference for benches/cpu.py: the webhook payhook handles, written the way a careful
user of Powertools for AWS Lambda (Python) would write it.

Same job as payhook per delivery: verify the Standard Webhooks signature over the raw body
(constant time, timestamp tolerance), parse, key the money movement on provider:reference, claim
it with Powertools idempotency (DynamoDB persistence layer: conditional PutItem, UpdateItem to
COMPLETED, stored response replayed for duplicates, payload validation for same key / other
money), inside it the payment transition (conditional UpdateItem) and the ledger entry
(conditional PutItem), then append the delivery to a log table (PutItem). Per delivery: a
structured log line (Powertools Logger) and one EMF metric line (Powertools Metrics), as payhook
writes one log line and one EMF line. Clients are built once, at import (the init phase).

Tables (created by benches/cpu.py): PYREF_IDEMPOTENCY_TABLE (id), PYREF_PAYMENTS_TABLE (pk),
PYREF_LEDGER_TABLE (pk, sk), PYREF_EVENTS_TABLE (pk, sk).
"""
import base64
import hashlib
import hmac
import json
import os
import time

import boto3
from botocore.exceptions import ClientError
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

TOLERANCE_S = 300
SECRETS = [base64.b64decode(s.split("_", 1)[1]) for s in os.environ["PAYHOOK_GENERIC_SECRETS"].split()]

logger = Logger(service="pyref")
metrics = Metrics(namespace="pyref", service="pyref")
dynamodb = boto3.client("dynamodb")  # AWS_ENDPOINT_URL_DYNAMODB: the same dynalite as payhook
PAYMENTS = os.environ["PYREF_PAYMENTS_TABLE"]
LEDGER = os.environ["PYREF_LEDGER_TABLE"]
EVENTS = os.environ["PYREF_EVENTS_TABLE"]
persistence = DynamoDBPersistenceLayer(table_name=os.environ["PYREF_IDEMPOTENCY_TABLE"], boto3_client=dynamodb)
config = IdempotencyConfig(
    event_key_jmespath="key",
    payload_validation_jmespath="[account, amount, currency]",
    expires_after_seconds=30 * 24 * 3600,
)


def verify(headers, body):
    """Standard Webhooks: v1,base64(HMAC-SHA256(secret, "{id}.{timestamp}.{body}"))."""
    msg_id, ts, sigs = headers.get("webhook-id"), headers.get("webhook-timestamp"), headers.get("webhook-signature")
    if not (msg_id and ts and sigs):
        return False
    try:
        if abs(time.time() - int(ts)) > TOLERANCE_S:
            return False
    except ValueError:
        return False
    signed = f"{msg_id}.{ts}.".encode() + body
    expected = [base64.b64encode(hmac.new(k, signed, hashlib.sha256).digest()) for k in SECRETS]
    for sig in sigs.split():
        version, _, value = sig.partition(",")
        if version == "v1" and any(hmac.compare_digest(value.encode(), e) for e in expected):
            return True
    return False


@idempotent_function(data_keyword_argument="payment", persistence_store=persistence, config=config)
def apply_payment(payment):
    key = payment["key"]
    try:
        dynamodb.update_item(
            TableName=PAYMENTS,
            Key={"pk": {"S": key}},
            UpdateExpression="SET #s = :paid, amount = :a, currency = :c, account = :acct, paid_key = :k",
            ConditionExpression="attribute_not_exists(pk) OR #s IN (:pending, :processing) OR paid_key = :k",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":paid": {"S": "PAID"}, ":pending": {"S": "PENDING"}, ":processing": {"S": "PROCESSING"},
                ":a": {"N": str(payment["amount"])}, ":c": {"S": payment["currency"]},
                ":acct": {"S": payment["account"]}, ":k": {"S": key},
            },
        )
    except ClientError as e:
        if e.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        return {"status": "stale", "key": key}
    try:
        dynamodb.put_item(
            TableName=LEDGER,
            Item={
                "pk": {"S": f"{payment['account']}#{payment['currency']}"},
                "sk": {"S": f"{payment['created']}#{key}"},
                "amount": {"N": str(payment["amount"])},
                "key": {"S": key},
            },
            ConditionExpression="attribute_not_exists(sk)",
        )
    except ClientError as e:
        if e.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise  # already posted by an earlier attempt otherwise
    return {"status": "applied", "key": key, "reference": payment["reference"], "account": payment["account"],
            "amount": payment["amount"], "currency": payment["currency"]}


def answer(status, body):
    return {"statusCode": status, "headers": {"content-type": "application/json"}, "body": json.dumps(body)}


@metrics.log_metrics
def lambda_handler(event, context):
    config.register_lambda_context(context)
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    raw = event.get("body") or ""
    body = base64.b64decode(raw) if event.get("isBase64Encoded") else raw.encode()
    metrics.add_dimension(name="Provider", value="generic")
    if not verify(headers, body):
        metrics.add_metric(name="Rejected", unit=MetricUnit.Count, value=1)
        logger.info("rejected", extra={"provider": "generic", "reason": "signature"})
        return answer(401, {"error": "invalid_signature"})
    try:
        evt = json.loads(body)
        data = evt["data"]
        payment = {"key": f"generic:payment:{data['reference']}", "reference": data["reference"],
                   "account": data["account"], "amount": int(data["amount"]), "currency": data["currency"],
                   "created": int(evt["created"])}
    except (ValueError, KeyError, TypeError):
        metrics.add_metric(name="Rejected", unit=MetricUnit.Count, value=1)
        return answer(400, {"error": "invalid_field"})
    try:
        result, status, outcome = apply_payment(payment=payment), 200, "applied"
    except IdempotencyAlreadyInProgressError:
        result, status, outcome = {"error": "in_flight"}, 409, "in_flight"
    except IdempotencyValidationError:
        result, status, outcome = {"error": "reference_conflict"}, 422, "conflict"
    dynamodb.put_item(
        TableName=EVENTS,
        Item={
            "pk": {"S": payment["reference"]},
            "sk": {"S": f"{int(time.time() * 1000)}#{evt['id']}"},
            "provider": {"S": "generic"}, "event_id": {"S": str(evt["id"])}, "key": {"S": payment["key"]},
            "outcome": {"S": outcome}, "body": {"B": body},
            "expires_at_s": {"N": str(int(time.time()) + 90 * 86400)},
        },
    )
    metrics.add_metric(name=outcome.title().replace("_", ""), unit=MetricUnit.Count, value=1)
    logger.info("delivery", extra={"provider": "generic", "event_id": evt["id"], "key": payment["key"], "outcome": outcome})
    return answer(status, result)
