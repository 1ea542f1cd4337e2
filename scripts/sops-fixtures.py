"""Helpers of scripts/sops-fixtures, run with the Python of sops 1.18's virtualenv
(ruamel.yaml and cryptography come with it).

add-age FILE RECIPIENT   unwrap FILE's data key with gpg, wrap it for an age RECIPIENT
                         with Debian's age, add it as the `age:` entry sops 3 writes
regex PLAIN OUT RECIPIENT  encrypt PLAIN as sops 3 does with encrypted_regex
                         '^(data|stringData)$' and mac_only_encrypted, for RECIPIENT;
                         follows the Go source: aes/cipher.go (32-byte IV, AAD = the
                         keys' path joined by ':' and a final ':'), sops.go (the MAC:
                         SHA-512, upper-case hex, seeded with SHA-256("sops") when only
                         encrypted values count; stored encrypted with lastmodified as AAD)
secrets DIR N RECIPIENT  N Secrets (for the benchmark): DIR/plain/sI.yaml in clear, and
                         DIR/encrypted/sI.yaml as `regex` writes them, each its own data key
dotenv PLAIN OUT RECIPIENT  encrypt the env file PLAIN as sops 3 writes a .env file (its
                         dotenv store: KEY=ENC[...] lines, the AAD 'KEY:', '#' comments
                         encrypted with the AAD ':', the default unencrypted_suffix,
                         every value a str, '\n' for a newline, the metadata flattened
                         into sops_... lines after the values: stores/dotenv/store.go,
                         stores/flatten.go), for RECIPIENT
"""
import base64, datetime, hashlib, json, os, re, subprocess, sys

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString


def is_yaml(path):
    # As sops picks a format: anything but YAML (JSON, a binary file's) is JSON.
    return path.endswith(".yaml") or path.endswith(".yml")


def load(path):
    with open(path) as f:
        if not is_yaml(path):
            return json.load(f, object_pairs_hook=dict)
        return YAML().load(f)


def dump(doc, path):
    with open(path, "w") as f:
        if not is_yaml(path):
            json.dump(doc, f, indent=4)
            f.write("\n")
        else:
            YAML().dump(doc, f)


def age_wrap(key, recipient):
    # A literal block, as sops writes it (a quoted scalar would be folded by the dump).
    armored = subprocess.run(["age", "-r", recipient, "-a"], input=key, capture_output=True, check=True).stdout.decode()
    return LiteralScalarString(armored)


def add_age(path, recipient):
    doc = load(path)
    key = subprocess.run(["gpg", "--batch", "--quiet", "--decrypt"], input=doc["sops"]["pgp"][0]["enc"].encode(), capture_output=True, check=True).stdout
    assert len(key) == 32, len(key)
    doc["sops"]["age"] = [{"recipient": recipient, "enc": age_wrap(key, recipient)}]
    dump(doc, path)


def encrypt(key, plaintext, aad, kind):
    iv = os.urandom(32)
    sealed = AESGCM(key).encrypt(iv, plaintext, aad.encode())
    data, tag = sealed[:-16], sealed[-16:]
    b64 = lambda b: base64.b64encode(b).decode()
    return "ENC[AES256_GCM,data:%s,iv:%s,tag:%s,type:%s]" % (b64(data), b64(iv), b64(tag), kind)


def as_bytes(value):
    if isinstance(value, bool):
        return ("True" if value else "False").encode(), "bool"
    if isinstance(value, int):
        return str(value).encode(), "int"
    return str(value).encode(), "str"


def regex(plain, out, recipient):
    rule = re.compile(r"^(data|stringData)$")
    key = os.urandom(32)
    mac = hashlib.sha512(hashlib.sha256(b"sops").digest())

    def walk(node, path, encrypted):
        if isinstance(node, dict):
            for k in node:
                inside = encrypted or bool(rule.search(k))
                node[k] = walk(node[k], path + [k], inside)
            return node
        if isinstance(node, list):
            return [walk(v, path, encrypted) for v in node]
        if not encrypted or node is None or node == "":
            return node
        plaintext, kind = as_bytes(node)
        mac.update(plaintext)
        return encrypt(key, plaintext, ":".join(path) + ":", kind)

    doc = walk(load(plain), [], False)
    lastmodified = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc["sops"] = {
        "kms": [], "gcp_kms": [], "azure_kv": [], "hc_vault": [],
        "age": [{"recipient": recipient, "enc": age_wrap(key, recipient)}],
        "lastmodified": lastmodified,
        "mac": encrypt(key, mac.hexdigest().upper().encode(), lastmodified, "str"),
        "pgp": [],
        "encrypted_regex": "^(data|stringData)$",
        "mac_only_encrypted": True,
        "version": "3.9.0",
    }
    dump(doc, out)


def dotenv(plain, out, recipient):
    key = os.urandom(32)
    mac = hashlib.sha512()
    lines = []
    with open(plain) as f:
        for line in f.read().split("\n"):
            if not line:
                continue
            if line.startswith("#"):
                lines.append("#" + encrypt(key, line[1:].encode(), ":", "comment"))
                continue
            name, value = line.split("=", 1)
            value = value.replace("\\n", "\n")
            mac.update(value.encode())
            if not name.endswith("_unencrypted") and value != "":
                value = encrypt(key, value.encode(), name + ":", "str")
            lines.append(name + "=" + value.replace("\n", "\\n"))
    lastmodified = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    metadata = [
        ("age__list_0__map_enc", str(age_wrap(key, recipient))),
        ("age__list_0__map_recipient", recipient),
        ("lastmodified", lastmodified),
        ("mac", encrypt(key, mac.hexdigest().upper().encode(), lastmodified, "str")),
        ("unencrypted_suffix", "_unencrypted"),
        ("version", "3.13.2"),
    ]
    for name, value in metadata:
        lines.append("sops_" + name + "=" + value.replace("\n", "\\n"))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def secrets(out, n, recipient):
    for folder in ("plain", "encrypted"):
        os.makedirs(os.path.join(out, folder), exist_ok=True)
    for i in range(int(n)):
        doc = {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "secret-%d" % i, "labels": {"app": "bench"}},
            "type": "Opaque",
            "stringData": {"username": "user-%d" % i, "password": base64.b64encode(os.urandom(24)).decode()},
            "data": {"token": base64.b64encode(os.urandom(32)).decode()},
        }
        plain = os.path.join(out, "plain", "s%d.yaml" % i)
        dump(doc, plain)
        regex(plain, os.path.join(out, "encrypted", "s%d.yaml" % i), recipient)


if __name__ == "__main__":
    commands = {"add-age": add_age, "regex": regex, "dotenv": dotenv, "secrets": secrets}
    commands[sys.argv[1]](*sys.argv[2:])
