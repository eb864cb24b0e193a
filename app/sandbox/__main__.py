"""Run the sandbox provider (a stand-in WhatsApp Cloud API) until SIGTERM or SIGINT."""

import argparse

from app.sandbox.server import serve


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m app.sandbox", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args()
    serve(args.host, args.port)


if __name__ == "__main__":
    main()
