package airflowtfos.hadooplab;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;

/** The launcher's command line, validated once. */
final class LabOptions {
    static final String USAGE = "usage: HadoopLab --dir DIR [--datanodes N] [--nodemanagers N]"
        + " [--nodemanager-vcores N] [--namenode-port P] [--namenode-http-port P]"
        + " [--resourcemanager-web-port P] [--ha] [--exit-on-stdin-eof]"
        + " [--kerberos-principal SERVICE/HOST@REALM --kerberos-keytab FILE [--http-principal HTTP/HOST@REALM]"
        + " [--proxy-user NAME]... [--token-renew-secs N] [--token-max-lifetime-secs N]]";
    /** The nameservice of an HA pair of NameNodes (hdfs://lab). */
    static final String NAMESERVICE = "lab";
    /** MiniYARNCluster gives every NodeManager 4096 MB; it is not configurable there. */
    static final int NODE_MANAGER_MB = 4096;

    Path dir;
    int dataNodes = 2;
    int nodeManagers = 2;
    int nodeManagerVcores = 4;
    int nameNodePort = 0;
    int nameNodeHttpPort = 0;
    int resourceManagerWebPort = 0;
    boolean exitOnStdinEof = false;
    /** An HA pair of NameNodes (nn0 active, nn1 standby) instead of one NameNode. */
    boolean ha = false;
    /** Secure mode (see {@link Security}) when set: the daemons' principal and the keytab holding it and HTTP's. */
    String kerberosPrincipal;
    Path kerberosKeytab;
    String httpPrincipal;
    /** Users that may impersonate others (hadoop.proxyuser.NAME.hosts/groups = *), besides the lab's own. */
    List<String> proxyUsers = new ArrayList<>();
    /** Delegation tokens' renew interval and lifetime, short so that a test outlives them. */
    int tokenRenewSecs = 86400;
    int tokenMaxLifetimeSecs = 7 * 86400;

    static LabOptions parse(String[] args) {
        LabOptions o = new LabOptions();
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            switch (arg) {
                case "--dir" -> o.dir = Paths.get(value(args, ++i, arg)).toAbsolutePath().normalize();
                case "--datanodes" -> o.dataNodes = number(args, ++i, arg, 1);
                case "--nodemanagers" -> o.nodeManagers = number(args, ++i, arg, 0);
                case "--nodemanager-vcores" -> o.nodeManagerVcores = number(args, ++i, arg, 1);
                case "--namenode-port" -> o.nameNodePort = number(args, ++i, arg, 0);
                case "--namenode-http-port" -> o.nameNodeHttpPort = number(args, ++i, arg, 0);
                case "--resourcemanager-web-port" -> o.resourceManagerWebPort = number(args, ++i, arg, 0);
                case "--exit-on-stdin-eof" -> o.exitOnStdinEof = true;
                case "--ha" -> o.ha = true;
                case "--kerberos-principal" -> o.kerberosPrincipal = value(args, ++i, arg);
                case "--kerberos-keytab" -> o.kerberosKeytab = Paths.get(value(args, ++i, arg)).toAbsolutePath();
                case "--http-principal" -> o.httpPrincipal = value(args, ++i, arg);
                case "--proxy-user" -> o.proxyUsers.add(value(args, ++i, arg));
                case "--token-renew-secs" -> o.tokenRenewSecs = number(args, ++i, arg, 10);
                case "--token-max-lifetime-secs" -> o.tokenMaxLifetimeSecs = number(args, ++i, arg, 10);
                default -> throw new IllegalArgumentException("unknown option " + arg);
            }
        }
        if (o.dir == null) {
            throw new IllegalArgumentException("--dir DIR is required: the folder that receives the *-site.xml files");
        }
        if (o.ha && (o.nameNodePort != 0 || o.nameNodeHttpPort != 0)) {
            throw new IllegalArgumentException("--ha chooses the two NameNodes' ports itself: leave out --namenode-port"
                + " and --namenode-http-port");
        }
        if ((o.kerberosPrincipal == null) != (o.kerberosKeytab == null)) {
            throw new IllegalArgumentException("secure mode needs both --kerberos-principal and --kerberos-keytab");
        }
        if (o.kerberosKeytab != null && !Files.isReadable(o.kerberosKeytab)) {
            throw new IllegalArgumentException("--kerberos-keytab " + o.kerberosKeytab + " cannot be read");
        }
        if (o.tokenMaxLifetimeSecs < o.tokenRenewSecs) {
            throw new IllegalArgumentException("--token-max-lifetime-secs must be at least --token-renew-secs");
        }
        return o;
    }

    boolean secure() {
        return kerberosPrincipal != null;
    }

    private static String value(String[] args, int i, String option) {
        if (i >= args.length) {
            throw new IllegalArgumentException(option + " needs a value");
        }
        return args[i];
    }

    private static int number(String[] args, int i, String option, int min) {
        String v = value(args, i, option);
        int n;
        try {
            n = Integer.parseInt(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(option + " must be a whole number, not " + v);
        }
        if (n < min) {
            throw new IllegalArgumentException(option + " must be at least " + min + ", not " + n);
        }
        return n;
    }
}
