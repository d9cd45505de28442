#!/bin/sh
# What docker-compose.yml's Apache Kafka runs with, SASL (PLAIN) over TLS on both of its
# client listeners: a certificate authority of its own, the broker's certificate (for
# kafka, localhost and 127.0.0.1) and the users' passwords. Run it once before the first
# `docker compose up`; it leaves an existing set alone (FORCE=1 makes a new CA and new
# passwords, after which every client needs the new ca.pem).
#
#   docker/kafka/make-certs.sh [DIR]      DIR defaults to docker/kafka/certs (git-ignored)
#
# DIR then holds:
#   ca.pem              the CA's certificate: what clients verify the broker against
#   kafka.keystore.pem  the broker's key (PKCS#8, encrypted), its certificate and the CA:
#                       a PEM keystore (ssl.keystore.type=PEM)
#   kafka.env           the broker's secrets, read by compose (env_file): the key's
#                       password and the JAAS lines that list the users and passwords
#   grimoire.env        GRIMOIRE_KAFKA_SASL_PASSWORD, for the Grimoire services
#
# The CA's key never leaves a temporary folder: nothing else can be signed under this CA.
# Needs only openssl (1.1.1 or newer, or LibreSSL).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/certs}
days=${DAYS:-825}

if [ -s "$dir/kafka.keystore.pem" ] && [ "${FORCE:-0}" != 1 ]; then
    echo "$dir already holds the broker's certificates and passwords (FORCE=1 makes new ones)"
    exit 0
fi
command -v openssl >/dev/null 2>&1 || { echo "make-certs.sh needs openssl" >&2; exit 1; }

umask 077
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

secret() { openssl rand -hex 24; }
key_password=$(secret)
admin_password=$(secret)
grimoire_password=$(secret)
printf '%s' "$key_password" > "$work/key-password"

# Extensions from a file rather than -addext, which older OpenSSL and LibreSSL lack.
cat > "$work/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = Grimoire compose Kafka CA
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
# clientAuth too: the broker is a client of its own INTERNAL listener.
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:kafka, DNS:localhost, IP:127.0.0.1
authorityKeyIdentifier = keyid
EOF

openssl ecparam -name prime256v1 -genkey -noout -out "$work/ca.key"
openssl req -new -x509 -config "$work/openssl.cnf" -extensions ca -key "$work/ca.key" \
    -sha256 -days "$days" -out "$work/ca.pem"

openssl ecparam -name prime256v1 -genkey -noout -out "$work/kafka.key"
openssl req -new -config "$work/openssl.cnf" -key "$work/kafka.key" -subj "/CN=kafka" \
    -out "$work/kafka.csr"
openssl x509 -req -in "$work/kafka.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -sha256 -days "$days" \
    -extfile "$work/openssl.cnf" -extensions server -out "$work/kafka.crt" 2>/dev/null
openssl verify -CAfile "$work/ca.pem" "$work/kafka.crt" >/dev/null

# Kafka reads a PEM keystore file only with a key password, so the key is encrypted
# PKCS#8. With PBES1 (SHA-1, 3DES): a Java before 21 cannot decrypt a PBES2 key (AES,
# PBKDF2) the way Kafka asks for it ("PBES2 SecretKeyFactory not available", measured
# on OpenJDK 17); the password sits in kafka.env beside it either way.
openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES -in "$work/kafka.key" \
    -passout "file:$work/key-password" -out "$work/kafka.key.p8"
cat "$work/kafka.key.p8" "$work/kafka.crt" "$work/ca.pem" > "$work/kafka.keystore.pem"

# PLAIN's users live in the listener's JAAS line; username/password are the broker's own
# (it is a client of its INTERNAL listener), user_<name> every user it accepts.
jaas="org.apache.kafka.common.security.plain.PlainLoginModule required"
jaas="$jaas username=\"admin\" password=\"$admin_password\""
jaas="$jaas user_admin=\"$admin_password\" user_grimoire=\"$grimoire_password\";"
cat > "$work/kafka.env" <<EOF
# Made by docker/kafka/make-certs.sh: the compose broker's secrets (env_file).
KAFKA_SSL_KEY_PASSWORD=$key_password
KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG=$jaas
KAFKA_LISTENER_NAME_EXTERNAL_PLAIN_SASL_JAAS_CONFIG=$jaas
BROKER_ADMIN_PASSWORD=$admin_password
EOF
cat > "$work/grimoire.env" <<EOF
# Made by docker/kafka/make-certs.sh: the Grimoire services' Kafka password (env_file).
GRIMOIRE_KAFKA_SASL_PASSWORD=$grimoire_password
EOF

# Readable by the containers' own users (the broker's key is encrypted); the
# passwords stay the owner's alone (compose reads them on the host).
chmod 644 "$work/ca.pem" "$work/kafka.keystore.pem"
chmod 600 "$work/kafka.env" "$work/grimoire.env"
for name in ca.pem kafka.keystore.pem kafka.env grimoire.env; do
    mv -f "$work/$name" "$dir/$name"
done
chmod 755 "$dir"
echo "made the compose Kafka's CA, certificate and passwords in $dir"
