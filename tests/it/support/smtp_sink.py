"""An SMTP server for the alert tests: aiosmtpd on 127.0.0.1:PORT that requires STARTTLS
with the given certificate, takes any AUTH PLAIN/LOGIN login whose password is PASSWORD,
and writes each message it receives to DIR/N.eml. Prints "ready" once listening.

Usage: smtp_sink.py PORT CERT KEY DIR PASSWORD
"""

import os
import ssl
import sys
import time

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class Keep:
    def __init__(self, folder):
        self.folder = folder
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        path = os.path.join(self.folder, f"{self.count}.eml")
        with open(path + ".part", "wb") as f:
            f.write(b"X-Tls: " + (b"yes" if session.ssl else b"no") + b"\r\n")
            f.write(b"X-Rcpt: " + ",".join(envelope.rcpt_tos).encode() + b"\r\n")
            f.write(envelope.original_content or envelope.content)
        os.rename(path + ".part", path)
        return "250 Message accepted for delivery"


def main():
    port, cert, key, folder, password = sys.argv[1:6]
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    def authenticate(server, session, envelope, mechanism, auth_data):
        if isinstance(auth_data, LoginPassword) and auth_data.password.decode() == password:
            return AuthResult(success=True)
        return AuthResult(success=False, handled=False)

    controller = Controller(
        Keep(folder),
        hostname="127.0.0.1",
        port=int(port),
        tls_context=context,
        require_starttls=True,
        authenticator=authenticate,
        auth_required=True,
        auth_require_tls=True,
    )
    controller.start()
    print("ready", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
