#!/usr/bin/env python3
"""Checks a SigV4-signed S3 request against botocore's S3 signer (S3SigV4Auth).

  python3 sigv4_reference.py REQUEST_FILE URL SECRET_KEY REGION [SESSION_TOKEN]

REQUEST_FILE holds the request line and headers as the server received them.
botocore signs the same method, URL and the headers the request says it
signed (SignedHeaders), at the request's own X-Amz-Date; the script prints
"ok" when its signature is the request's, else what differs, and exits 1.
"""
import re
import sys

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def main():
    request_file, url, secret, region = sys.argv[1:5]
    token = sys.argv[5] if len(sys.argv) > 5 else None
    lines = open(request_file, encoding="latin-1", newline="").read().split("\r\n")
    method = lines[0].split(" ")[0]
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    auth = headers.get("authorization", "")
    m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                 r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})$", auth)
    if not m:
        print("not a SigV4 Authorization header: " + auth)
        return 1
    access_key, _, signed_region, service, signed, signature = m.groups()
    if signed_region != region:
        print(f"signed for region {signed_region}, not {region}")
        return 1
    names = signed.split(";")
    request = AWSRequest(method=method, url=url, headers={n: headers[n] for n in names if n in headers})
    request.context["timestamp"] = headers["x-amz-date"]
    signer = S3SigV4Auth(Credentials(access_key, secret, token), service, region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if expected != signature:
        print(f"botocore signs {expected}, the request carries {signature}; botocore's canonical request:\n{canonical}")
        return 1
    for must in ("host", "x-amz-date", "x-amz-content-sha256") + (("x-amz-security-token",) if token else ()):
        if must not in names:
            print(f"{must} is not among the signed headers ({signed})")
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
