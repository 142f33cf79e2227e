package airflowtfos.hadooplab;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * Secure mode for the lab: Kerberos on every RPC, SPNEGO on the web endpoints, block access tokens, short-lived
 * delegation tokens and {@code auth_to_local} rules, against an MIT KDC that the caller runs.
 *
 * <p>One JVM holds one Kerberos login (Hadoop's login user is process-wide, and each daemon's RPC server accepts
 * tickets for whoever is logged in), so the lab's NameNode, DataNodes, ResourceManager and NodeManagers share one
 * service principal, where a site gives each its own ({@code nn/_HOST}, {@code dn/_HOST}, {@code rm/_HOST},
 * {@code nm/_HOST}). The DataNodes run without privileged ports or SASL on their data transfer
 * ({@code ignore.secure.ports.for.testing}), which a site replaces by jsvc's privileged ports or by
 * {@code dfs.data.transfer.protection} with HTTPS (docs/hadoop-lab.md).
 */
final class Security {
    private final LabOptions options;
    private final String realm;

    Security(LabOptions options) {
        this.options = options;
        String principal = options.kerberosPrincipal;
        int at = principal.indexOf('@');
        if (at < 0 || principal.indexOf('/') < 0) {
            throw new IllegalArgumentException("--kerberos-principal must look like service/host@REALM, not "
                + principal);
        }
        this.realm = principal.substring(at + 1);
    }

    String httpPrincipal() {
        return options.httpPrincipal != null ? options.httpPrincipal : "HTTP/" + HadoopLab.LOOPBACK + "@" + realm;
    }

    /**
     * The rules that turn principals into short names: the daemons' principal becomes the user the lab runs as
     * (HDFS's superuser, as {@code hdfs} would be on a site), a one-part principal of the realm its first part;
     * anything else (another realm, another service) matches no rule and is refused.
     */
    String authToLocal(String superuser) {
        String service = options.kerberosPrincipal.substring(0, options.kerberosPrincipal.indexOf('/'));
        return String.join("\n",
            "RULE:[2:$1@$0](" + service + "@" + realm.replace(".", "\\.") + ")s/.*/" + superuser + "/",
            "RULE:[2:$1@$0](HTTP@" + realm.replace(".", "\\.") + ")s/.*/" + superuser + "/",
            "RULE:[1:$1@$0](.*@" + realm.replace(".", "\\.") + ")s/@.*//");
    }

    /** What the daemons run with: set on {@code conf} before anything starts. */
    void configureDaemons(Configuration conf, String superuser) {
        for (Map.Entry<String, String> e : clientSettings(superuser).entrySet()) {
            conf.set(e.getKey(), e.getValue());
        }
        String principal = options.kerberosPrincipal;
        String keytab = options.kerberosKeytab.toString();
        conf.set("hadoop.security.authorization", "true");
        conf.set("dfs.namenode.keytab.file", keytab);
        conf.set("dfs.datanode.kerberos.principal", principal);
        conf.set("dfs.datanode.keytab.file", keytab);
        conf.set("dfs.web.authentication.kerberos.principal", httpPrincipal());
        conf.set("dfs.web.authentication.kerberos.keytab", keytab);
        conf.set("dfs.block.access.token.enable", "true");
        conf.set("ignore.secure.ports.for.testing", "true");
        long renewMs = options.tokenRenewSecs * 1000L;
        long lifetimeMs = options.tokenMaxLifetimeSecs * 1000L;
        conf.setLong("dfs.namenode.delegation.token.renew-interval", renewMs);
        conf.setLong("dfs.namenode.delegation.token.max-lifetime", lifetimeMs);
        conf.setLong("yarn.resourcemanager.delegation.token.renew-interval", renewMs);
        conf.setLong("yarn.resourcemanager.delegation.token.max-lifetime", lifetimeMs);
        conf.set("yarn.resourcemanager.keytab", keytab);
        // With log aggregation on (the lab's, as most sites'), the ResourceManager keeps renewing an ended
        // application's delegation tokens for yarn.nm.liveness-monitor.expiry-interval-ms (a site's: 10 min), so
        // that the NodeManagers can upload its logs, and then cancels them: 20 s here, looked at every second.
        conf.setLong("yarn.nm.liveness-monitor.expiry-interval-ms", 20_000L);
        conf.setLong("yarn.resourcemanager.delayed.delegation-token.removal-interval-ms", 1_000L);
        conf.set("yarn.nodemanager.principal", principal);
        conf.set("yarn.nodemanager.keytab", keytab);
        for (String prefix : new String[] {"yarn.resourcemanager.webapp", "yarn.nodemanager.webapp"}) {
            conf.set(prefix + ".spnego-principal", httpPrincipal());
            conf.set(prefix + ".spnego-keytab-file", keytab);
        }
        // SPNEGO on the web endpoints that use Hadoop's HTTP filter (the ResourceManager's REST API among them;
        // WebHDFS has its own settings above). The ResourceManager swaps in its filter that also takes its tokens.
        conf.set("hadoop.http.filter.initializers", "org.apache.hadoop.security.AuthenticationFilterInitializer");
        conf.set("hadoop.http.authentication.type", "kerberos");
        conf.set("hadoop.http.authentication.simple.anonymous.allowed", "false");
        conf.set("hadoop.http.authentication.kerberos.principal", httpPrincipal());
        conf.set("hadoop.http.authentication.kerberos.keytab", keytab);
        conf.set("hadoop.http.authentication.kerberos.name.rules", authToLocal(superuser));
    }

    /** What a client needs in the site files: which authentication, the servers' principals, the rules. */
    Map<String, String> clientSettings(String superuser) {
        Map<String, String> s = new LinkedHashMap<>();
        s.put("hadoop.security.authentication", "kerberos");
        s.put("hadoop.security.auth_to_local", authToLocal(superuser));
        s.put("dfs.namenode.kerberos.principal", options.kerberosPrincipal);
        s.put("yarn.resourcemanager.principal", options.kerberosPrincipal);
        return s;
    }

    /** Log this JVM in as the daemons' principal: every daemon started afterwards runs as it. */
    void login(Configuration conf) throws IOException {
        UserGroupInformation.setConfiguration(conf);
        UserGroupInformation.loginUserFromKeytab(options.kerberosPrincipal, options.kerberosKeytab.toString());
    }

    /** What lab.json says of the realm (no secret: the keytab's path, readable by its owner only). */
    Map<String, Object> describe() {
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("realm", realm);
        d.put("principal", options.kerberosPrincipal);
        d.put("http_principal", httpPrincipal());
        d.put("keytab", options.kerberosKeytab.toString());
        d.put("krb5_conf", System.getProperty("java.security.krb5.conf"));
        d.put("token_renew_secs", options.tokenRenewSecs);
        d.put("token_max_lifetime_secs", options.tokenMaxLifetimeSecs);
        d.put("proxy_users", List.copyOf(options.proxyUsers));
        return d;
    }
}
