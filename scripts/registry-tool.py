#!/usr/bin/env python3
"""What the registry tests do to a registry that berth must not do for them: push an OCI
artifact through the distribution API, sign one as cosign does (keyed, simple signing),
make cosign key pairs, and serve a folder over HTTPS (a Helm repository). Written apart from
berth on purpose: the signatures berth verifies are made here, with Python's cryptography
(sops 1.18's virtualenv, scripts/sops), not by the code that checks them.

  registry-tool.py keygen DIR                      DIR/cosign.key, DIR/cosign.pub
  registry-tool.py push HOST REPO TAG LAYER MEDIA  a one-layer artifact; prints its digest
  registry-tool.py tags HOST REPO LAYER MEDIA FILE  the same, under every tag FILE lists
  registry-tool.py sign HOST REPO DIGEST KEY       a cosign signature of REPO@DIGEST
  registry-tool.py serve DIR PORT CERT KEY         HTTPS static files until killed
  registry-tool.py token DIR PORT CERT KEY ISSUER SERVICE USER:PASSWORD
      a registry's token server (Distribution's token flow) until killed: writes the
      certificate of its signing key to DIR/token-bundle.pem, then grants what a GET
      /token asks to USER:PASSWORD (basic auth), as an ES256 JWT

Pushes read BERTH_REGISTRY_CA (a CA file) and BERTH_REGISTRY_AUTH (user:password), and
answer a registry's bearer challenge at its realm with the same login.
"""
import base64
import hashlib
import http.server
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

FLUX_CONFIG = "application/vnd.cncf.flux.config.v1+json"
HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"


def request(method, url, body=None, headers=None, bearer=None):
    context = ssl.create_default_context(cafile=os.environ["BERTH_REGISTRY_CA"])
    headers = dict(headers or {})
    auth = os.environ.get("BERTH_REGISTRY_AUTH")
    basic = "Basic " + base64.b64encode(auth.encode()).decode() if auth else None
    if bearer or basic:
        headers["Authorization"] = f"Bearer {bearer}" if bearer else basic
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, context=context) as answer:
            return answer.headers, answer.read()
    except urllib.error.HTTPError as e:
        challenge = e.headers.get("WWW-Authenticate", "")
        if e.code != 401 or bearer or not challenge.lower().startswith("bearer "):
            raise
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        query = urllib.parse.urlencode({k: v for k, v in params.items() if k != "realm"})
        token_req = urllib.request.Request(f"{params['realm']}?{query}",
                                           headers={"Authorization": basic})
        with urllib.request.urlopen(token_req, context=context) as answer:
            token = json.loads(answer.read())["token"]
        return request(method, url, body, headers, bearer=token)


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def upload(host, repo, data):
    headers, _ = request("POST", f"https://{host}/v2/{repo}/blobs/uploads/", b"")
    location = headers["Location"]
    if location.startswith("/"):
        location = f"https://{host}{location}"
    sep = "&" if "?" in location else "?"
    request("PUT", f"{location}{sep}digest={digest(data)}", data,
            {"Content-Type": "application/octet-stream"})
    return {"digest": digest(data), "size": len(data)}


def push(host, repo, tag, layer, media, config_media=None, annotations=None):
    return tag_all(host, repo, [tag], layer, media, config_media, annotations)


def tag_all(host, repo, tags, layer, media, config_media=None, annotations=None):
    """One artifact's blobs uploaded once, its manifest put under each of `tags`."""
    config = b"{}"
    config_media = config_media or (HELM_CONFIG if media == HELM_CHART else FLUX_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": config_media, **upload(host, repo, config)},
        "layers": [{"mediaType": media, **upload(host, repo, layer),
                    "annotations": annotations or {}}],
    }
    body = json.dumps(manifest).encode()
    for tag in tags:
        request("PUT", f"https://{host}/v2/{repo}/manifests/{tag}", body,
                {"Content-Type": MANIFEST})
    return digest(body)


def keygen(folder):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    with open(os.path.join(folder, "cosign.key"), "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    with open(os.path.join(folder, "cosign.pub"), "wb") as f:
        f.write(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def sign(host, repo, target, key_file):
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    with open(key_file, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    payload = json.dumps({
        "critical": {
            "identity": {"docker-reference": f"{host}/{repo}"},
            "image": {"docker-manifest-digest": target},
            "type": "cosign container image signature",
        },
        "optional": None,
    }).encode()
    signature = base64.b64encode(key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    tag = target.replace(":", "-") + ".sig"
    return push(host, repo, tag, payload, SIMPLE_SIGNING,
                config_media="application/vnd.oci.image.config.v1+json",
                annotations={"dev.cosignproject.cosign/signature": signature})


def serve(folder, port, cert, key):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=folder, **kwargs)

        def log_message(self, *args):
            pass

    print("serving", flush=True)
    serve_https(port, Quiet, cert, key)


def serve_https(port, handler, cert, key):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token_server(folder, port, cert, key, issuer, service, login):
    """Distribution's token flow, its server side: an ES256 JWT whose x5c header carries
    the self-signed certificate the registry's rootcertbundle trusts."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    from cryptography.x509.oid import NameOID
    signer = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(signer.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                   .sign(signer, hashes.SHA256()))
    bundle = os.path.join(folder, "token-bundle.pem")
    with open(bundle + ".tmp", "wb") as f:
        f.write(certificate.public_bytes(serialization.Encoding.PEM))
    os.rename(bundle + ".tmp", bundle)
    der = base64.b64encode(certificate.public_bytes(serialization.Encoding.DER)).decode()

    def jwt(access):
        header = {"typ": "JWT", "alg": "ES256", "x5c": [der]}
        moment = int(time.time())
        claims = {"iss": issuer, "sub": login.split(":")[0], "aud": service,
                  "exp": moment + 300, "nbf": moment - 10, "iat": moment,
                  "jti": os.urandom(8).hex(), "access": access}
        signed = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
        r, s = decode_dss_signature(signer.sign(signed.encode(), ec.ECDSA(hashes.SHA256())))
        return signed + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    expected = "Basic " + base64.b64encode(login.encode()).decode()

    class Tokens(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.end_headers()
                return
            access = []
            for scope in query.get("scope", []):
                kind, repo, actions = scope.split(":", 2)
                access.append({"type": kind, "name": repo, "actions": actions.split(",")})
            body = json.dumps({"token": jwt(access), "expires_in": 300}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    serve_https(port, Tokens, cert, key)


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "keygen":
        keygen(*args)
    elif command == "push":
        host, repo, tag, layer, media = args
        with open(layer, "rb") as f:
            print(push(host, repo, tag, f.read(), media))
    elif command == "tags":
        # One artifact under every tag the file lists (a registry of many tags, quickly).
        host, repo, layer, media, tags = args
        with open(layer, "rb") as f, open(tags) as listed:
            print(tag_all(host, repo, listed.read().split(), f.read(), media))
    elif command == "sign":
        print(sign(*args))
    elif command == "serve":
        serve(*args)
    elif command == "token":
        token_server(*args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except urllib.error.HTTPError as e:
        sys.exit(f"{e.code} {e.reason}: {e.read().decode(errors='replace')}")
