"""The Powertools-Python reference for dynamo-claim's HTTP example: the same service (`POST
/charges` behind idempotency on the `Idempotency-Key` header, the answer the charge record with
the request's `memo` verbatim; `GET /charges` counting the charges that ran) as one plain HTTP
server, Powertools' `idempotent_function` over DynamoDB (boto3) doing what the tower layer does.
Stands beside `cargo run -p dynamo-claim --example http` in benches/http_instructions.py.

  CLAIMS_TABLE=t AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000 python powertools_http.py PORT
"""
import hashlib
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

import boto3
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

TABLE = os.environ["CLAIMS_TABLE"]
client = boto3.client("dynamodb", endpoint_url=os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"))
try:
    client.create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
except client.exceptions.ResourceInUseException:
    pass
persistence = DynamoDBPersistenceLayer(table_name=TABLE, boto3_client=client)
# The key is the header, the payload compared is method, path and body: as the tower layer.
config = IdempotencyConfig(event_key_jmespath="key", payload_validation_jmespath="[method, path, body]")
charges = 0


@idempotent_function(data_keyword_argument="request", persistence_store=persistence, config=config)
def charge(request):
    global charges
    charges += 1
    order = json.loads(request["body"])
    return {"charge": f"ch_{charges}", "amount_minor": order.get("amount_minor"), "memo": order.get("memo")}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def answer(self, status, value):
        out = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):
        self.answer(200, {"charges": charges})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0))).decode()
        key = self.headers.get("idempotency-key")
        if not key:
            return self.answer(400, {"error": "idempotency_key_missing"})
        request = {"key": key, "method": "POST", "path": self.path, "body": body,
                   "fingerprint": hashlib.sha256(body.encode()).hexdigest()}
        try:
            self.answer(201, charge(request=request))
        except IdempotencyAlreadyInProgressError:
            self.answer(409, {"error": "in_progress"})
        except IdempotencyValidationError:
            self.answer(422, {"error": "key_reused"})

    def log_message(self, *args):
        pass


class Server(HTTPServer):
    def handle_error(self, request, client_address):
        pass


Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
