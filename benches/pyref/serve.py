"""The Python reference as a plain HTTP server, to stand beside `payhook serve`: one process, one
thread (HTTP/1.1 keep-alive), each POST turned into the API Gateway v2 event the Lambda handler
takes. Usage: python serve.py PORT (prints nothing; ready when the port accepts)."""
import base64
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from handler import lambda_handler


class Context:
    function_name = "pyref"
    aws_request_id = "-"

    @staticmethod
    def get_remaining_time_in_millis():
        return 30_000


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        event = {
            "version": "2.0", "rawPath": self.path, "headers": dict(self.headers.items()),
            "body": base64.b64encode(body).decode(), "isBase64Encoded": True,
            "requestContext": {"http": {"method": "POST", "path": self.path}},
        }
        result = lambda_handler(event, Context())
        out = result["body"].encode()
        self.send_response(result["statusCode"])
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


class Server(HTTPServer):
    def handle_error(self, request, client_address):
        pass  # the bench client's connection reset when it is done


Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
