// A real OpenID Connect provider (npm oidc-provider 9.13.3) for the auth integration tests.
// Usage: node tests/oidc/server.mjs PORT   — listens on 127.0.0.1:PORT with a fresh signing key set
// (RS256 + ES256, random kids) on every start, so a restart on the same port is a key rotation.
// Prints one line "ready <issuer>" on stdout once it listens.

import { generateKeyPairSync, randomUUID } from 'node:crypto';
import Provider, { errors } from 'oidc-provider';

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0) {
  console.error('usage: node server.mjs PORT');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

// Resource servers (RFC 8707 resource indicators). Each `resource` asks for one token format.
const SCOPES = 'mission:read mission:write mission:admin';
const RESOURCES = {
  'https://mission.example/rs256': {
    audience: 'urn:mcp:mission-server', scope: SCOPES, accessTokenFormat: 'jwt',
    accessTokenTTL: 600, jwt: { sign: { alg: 'RS256' } },
  },
  'https://mission.example/es256': {
    audience: 'urn:mcp:mission-server', scope: SCOPES, accessTokenFormat: 'jwt',
    accessTokenTTL: 600, jwt: { sign: { alg: 'ES256' } },
  },
  'https://mission.example/opaque': {
    audience: 'urn:mcp:mission-server', scope: SCOPES, accessTokenFormat: 'opaque',
    accessTokenTTL: 600,
  },
  'https://other.example/rs256': {
    audience: 'urn:mcp:other-server', scope: SCOPES, accessTokenFormat: 'jwt',
    accessTokenTTL: 600, jwt: { sign: { alg: 'RS256' } },
  },
};

// Claims each client's tokens carry (oidc-provider's extraTokenClaims).
const CLAIMS = {
  'mission-control': {
    role: 'mission_control', roles: ['mission_control', 'engineer'], tenant: 'acme',
    realm_access: { roles: ['engineer'] }, capabilities: ['rocket.launch'],
  },
  observer: { role: 'observer', roles: ['observer'], tenant: 'globex' },
};

function client(id, scope) {
  const metadata = {
    client_id: id,
    client_secret: `${id}-secret`,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
  };
  if (scope) metadata.scope = scope;
  return metadata;
}

function signingKeys() {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' });
  return [
    { ...rsa, kid: `rsa-${randomUUID()}`, alg: 'RS256', use: 'sig' },
    { ...ec, kid: `ec-${randomUUID()}`, alg: 'ES256', use: 'sig' },
  ];
}

const provider = new Provider(issuer, {
  clients: [
    client('mission-control', SCOPES),
    client('observer', 'mission:read'),
    client('introspector', ''),
  ],
  scopes: ['openid', ...SCOPES.split(' ')],
  jwks: { keys: signingKeys() },
  cookies: { keys: [randomUUID()] },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true, allowedPolicy: async () => true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => undefined,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource) => {
        const info = RESOURCES[resource];
        if (!info) throw new errors.InvalidTarget();
        return info;
      },
    },
  },
  extraTokenClaims: async (_ctx, token) => CLAIMS[token.clientId],
});
provider.proxy = false;

const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});

function stop() {
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
