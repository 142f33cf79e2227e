package airflowtfos.hadooplab;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.nodemanager.NodeManager;

import sun.misc.Signal;

/**
 * Start Hadoop's own HDFS and YARN in this JVM, on 127.0.0.1, and describe them in a directory.
 *
 * <p>A MiniDFSCluster (a NameNode with WebHDFS, N DataNodes) and a MiniYARNCluster (a ResourceManager
 * with its REST API, N NodeManagers) start; then {@code core-site.xml}, {@code hdfs-site.xml},
 * {@code yarn-site.xml} and {@code lab.json} are written into DIR, and one line starting with
 * {@value #READY} is printed. The lab stops on SIGTERM, SIGINT, or, with {@code --exit-on-stdin-eof},
 * when its standard input closes. {@code lab.json} also names a control port on 127.0.0.1 (see
 * {@link LabControl}) that stops and starts DataNodes and NodeManagers.
 *
 * <p>With {@code --ha}, HDFS is an HA pair of NameNodes behind the nameservice {@code hdfs://lab} (nn0 active,
 * nn1 standby, sharing their edits in a folder), which the control port fails over; with
 * {@code --nodemanagers 0} there is no YARN.
 *
 * <p>Everything the daemons store goes under {@code DIR/data} ({@code hdfs/}, {@code yarn/}).
 */
public final class HadoopLab {
    static final String READY = "hadoop-lab ready ";
    static final String LOOPBACK = "127.0.0.1";

    private final LabOptions options;
    private MiniDFSCluster dfs;
    private MiniYARNCluster yarn;
    private LabControl control;
    private final Security security;

    private HadoopLab(LabOptions options) {
        this.options = options;
        this.security = options.secure() ? new Security(options) : null;
    }

    public static void main(String[] args) throws Exception {
        LabOptions options;
        try {
            options = LabOptions.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("hadoop-lab: " + e.getMessage());
            System.err.println(LabOptions.USAGE);
            System.exit(2);
            return;
        }
        HadoopLab lab = new HadoopLab(options);
        // Stop on the main thread, before the JVM's shutdown begins: Hadoop's daemons remove their own
        // shutdown hooks while they stop, which fails once the JVM is shutting down.
        CountDownLatch stopRequested = new CountDownLatch(1);
        for (String name : new String[] {"TERM", "INT", "HUP"}) {
            Signal.handle(new Signal(name), signal -> stopRequested.countDown());
        }
        long started = System.nanoTime();
        try {
            lab.start();
            double seconds = (System.nanoTime() - started) / 1e9;
            String description = lab.describe(seconds);
            lab.writeFile("lab.json", description + "\n");
            System.out.println(READY + description);
            System.out.flush();
        } catch (Throwable e) {
            say("failed to start: " + e);
            e.printStackTrace();
            lab.stop();
            System.exit(1);
        }
        if (options.exitOnStdinEof) {
            Thread watcher = new Thread(() -> {
                waitForEof(System.in);
                say("standard input closed");
                stopRequested.countDown();
            }, "hadoop-lab-stdin");
            watcher.setDaemon(true);
            watcher.start();
        }
        stopRequested.await();
        lab.stop();
        System.exit(0);
    }

    private static void waitForEof(InputStream in) {
        byte[] buffer = new byte[256];
        try {
            while (in.read(buffer) >= 0) {
                // discard: only the end of the stream matters
            }
        } catch (IOException e) {
            // a broken standard input counts as closed
        }
    }

    private void start() throws Exception {
        Path data = options.dir.resolve("data");
        Files.createDirectories(data);
        // MiniYARNCluster keeps its NodeManagers' folders under GenericTestUtils' test folder.
        System.setProperty("test.build.data", data.resolve("yarn").toString());

        Configuration conf = new HdfsConfiguration();
        conf.setBoolean("dfs.webhdfs.enabled", true);
        conf.setInt("dfs.replication", Math.min(2, options.dataNodes));
        conf.set("dfs.namenode.rpc-bind-host", LOOPBACK);
        conf.set("dfs.namenode.http-bind-host", LOOPBACK);
        conf.set("dfs.datanode.hostname", LOOPBACK);
        String user = System.getProperty("user.name");
        for (String proxy : proxyUsers(user)) {
            conf.set("hadoop.proxyuser." + proxy + ".hosts", "*");
            conf.set("hadoop.proxyuser." + proxy + ".groups", "*");
        }
        if (security != null) {
            security.configureDaemons(conf, user);
            security.login(conf);
        }
        MiniDFSCluster.Builder builder = new MiniDFSCluster.Builder(conf, data.resolve("hdfs").toFile())
            .numDataNodes(options.dataNodes);
        if (options.ha) {
            // The standby reads the active's edits every second, so that a failover finds it nearly caught up.
            conf.setInt("dfs.ha.tail-edits.period", 1);
            MiniDFSNNTopology.NSConf nameservice = new MiniDFSNNTopology.NSConf(LabOptions.NAMESERVICE);
            for (int i = 0; i < 2; i++) {
                nameservice.addNN(new MiniDFSNNTopology.NNConf("nn" + i).setIpcPort(freePort()).setHttpPort(freePort()));
            }
            builder.nnTopology(new MiniDFSNNTopology().addNameservice(nameservice));
        } else {
            builder.nameNodePort(options.nameNodePort).nameNodeHttpPort(options.nameNodeHttpPort);
        }
        dfs = builder.build();
        dfs.waitActive();
        if (options.ha) {
            dfs.transitionToActive(0);
        }
        prepareHdfs(dfs.getFileSystem(0), user);
        if (options.nodeManagers == 0) {
            control = new LabControl(dfs, null, 0);
            control.start();
            writeSiteFiles(user);
            return;
        }

        YarnConfiguration yconf = new YarnConfiguration(new Configuration(conf));
        // The shaded minicluster leaves out capacity-scheduler.xml: declare the one queue here.
        yconf.set("yarn.scheduler.capacity.root.queues", "default");
        yconf.set("yarn.scheduler.capacity.root.default.capacity", "100");
        yconf.set("yarn.scheduler.capacity.root.default.maximum-capacity", "100");
        yconf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "0.5");
        yconf.set(YarnConfiguration.RM_BIND_HOST, LOOPBACK);
        yconf.set(YarnConfiguration.NM_BIND_HOST, LOOPBACK);
        yconf.setInt(YarnConfiguration.NM_VCORES, options.nodeManagerVcores);
        yconf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
        yconf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, LabOptions.NODE_MANAGER_MB);
        yconf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, options.nodeManagerVcores);
        // A shared test machine's disk may be fuller than YARN's default 90% allows.
        yconf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 99.9f);
        // Containers' logs go to HDFS when their application ends, as on a production cluster (and a stopping
        // NodeManager then has no local log deletions to wait for).
        yconf.setBoolean(YarnConfiguration.LOG_AGGREGATION_ENABLED, true);
        yconf.set(YarnConfiguration.NM_REMOTE_APP_LOG_DIR, "/tmp/logs");
        // The ResourceManager's addresses on 127.0.0.1. The web port is chosen before it starts: with port 0
        // there, the applications' tracking URLs would say port 0 (the web proxy's address is read early).
        yconf.setBoolean(YarnConfiguration.YARN_MINICLUSTER_FIXED_PORTS, true);
        for (String key : new String[] {YarnConfiguration.RM_ADDRESS, YarnConfiguration.RM_SCHEDULER_ADDRESS,
            YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, YarnConfiguration.RM_ADMIN_ADDRESS}) {
            yconf.set(key, LOOPBACK + ":0");
        }
        int webPort = options.resourceManagerWebPort != 0 ? options.resourceManagerWebPort : freePort();
        yconf.set(YarnConfiguration.RM_WEBAPP_ADDRESS, LOOPBACK + ":" + webPort);
        yarn = new MiniYARNCluster("hadoop-lab", 1, options.nodeManagers, 1, 1);
        yarn.init(yconf);
        yarn.start();
        if (!yarn.waitForNodeManagersToConnect(60_000)) {
            throw new IllegalStateException("the NodeManagers did not register with the ResourceManager in 60 s");
        }

        control = new LabControl(dfs, yarn, options.nodeManagers);
        control.start();
        writeSiteFiles(user);
    }

    private List<String> proxyUsers(String user) {
        List<String> users = new ArrayList<>(List.of(user));
        users.addAll(options.proxyUsers);
        return users;
    }

    private static int freePort() throws IOException {
        try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getByName(LOOPBACK))) {
            return socket.getLocalPort();
        }
    }

    private static void prepareHdfs(FileSystem fs, String user) throws IOException {
        org.apache.hadoop.fs.Path tmp = new org.apache.hadoop.fs.Path("/tmp");
        fs.mkdirs(tmp);
        fs.setPermission(tmp, new FsPermission((short) 01777));
        fs.mkdirs(new org.apache.hadoop.fs.Path("/user/" + user));
    }

    private Configuration rmConfig() {
        return yarn.getResourceManager().getConfig();
    }

    /** Return host:port of a YARN address, with the host made 127.0.0.1 (where the lab binds). */
    private String yarnAddress(String key) {
        String value = rmConfig().get(key);
        if (value == null) {
            value = yarn.getConfig().get(key);
        }
        String port = value.substring(value.lastIndexOf(':') + 1);
        return LOOPBACK + ":" + port;
    }

    private String nameNodeRpc(int index) {
        return LOOPBACK + ":" + dfs.getNameNode(index).getNameNodeAddress().getPort();
    }

    private String nameNodeHttp(int index) {
        return LOOPBACK + ":" + dfs.getNameNode(index).getHttpAddress().getPort();
    }

    /** hdfs:// and the authority clients name: the nameservice of an HA pair, else the NameNode's address. */
    private String fsDefault() {
        return "hdfs://" + (options.ha ? LabOptions.NAMESERVICE : nameNodeRpc(0));
    }

    private int nameNodeCount() {
        return options.ha ? 2 : 1;
    }

    private void writeSiteFiles(String user) throws IOException {
        Map<String, String> core = new LinkedHashMap<>();
        core.put("fs.defaultFS", fsDefault());
        for (String proxy : proxyUsers(user)) {
            core.put("hadoop.proxyuser." + proxy + ".hosts", "*");
            core.put("hadoop.proxyuser." + proxy + ".groups", "*");
        }
        if (security != null) {
            core.putAll(security.clientSettings(user));
        }
        writeFile("core-site.xml", SiteXml.render(core));

        Map<String, String> hdfs = new LinkedHashMap<>();
        if (options.ha) {
            String ns = LabOptions.NAMESERVICE;
            hdfs.put("dfs.nameservices", ns);
            hdfs.put("dfs.ha.namenodes." + ns, "nn0,nn1");
            for (int i = 0; i < 2; i++) {
                hdfs.put("dfs.namenode.rpc-address." + ns + ".nn" + i, nameNodeRpc(i));
                hdfs.put("dfs.namenode.http-address." + ns + ".nn" + i, nameNodeHttp(i));
            }
            hdfs.put("dfs.client.failover.proxy.provider." + ns,
                "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
        } else {
            hdfs.put("dfs.namenode.rpc-address", nameNodeRpc(0));
            hdfs.put("dfs.namenode.http-address", nameNodeHttp(0));
        }
        hdfs.put("dfs.webhdfs.enabled", "true");
        hdfs.put("dfs.replication", String.valueOf(Math.min(2, options.dataNodes)));
        writeFile("hdfs-site.xml", SiteXml.render(hdfs));
        if (yarn == null) {
            return;
        }

        Map<String, String> site = new LinkedHashMap<>();
        site.put(YarnConfiguration.RM_HOSTNAME, LOOPBACK);
        site.put(YarnConfiguration.RM_ADDRESS, yarnAddress(YarnConfiguration.RM_ADDRESS));
        site.put(YarnConfiguration.RM_SCHEDULER_ADDRESS, yarnAddress(YarnConfiguration.RM_SCHEDULER_ADDRESS));
        site.put(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS,
            yarnAddress(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS));
        site.put(YarnConfiguration.RM_ADMIN_ADDRESS, yarnAddress(YarnConfiguration.RM_ADMIN_ADDRESS));
        site.put(YarnConfiguration.RM_WEBAPP_ADDRESS, yarnAddress(YarnConfiguration.RM_WEBAPP_ADDRESS));
        site.put(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, "128");
        site.put(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, String.valueOf(LabOptions.NODE_MANAGER_MB));
        site.put(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES,
            String.valueOf(options.nodeManagerVcores));
        writeFile("yarn-site.xml", SiteXml.render(site));
    }

    private String describe(double startSeconds) {
        Map<String, Object> d = new LinkedHashMap<>();
        d.put("pid", ProcessHandle.current().pid());
        d.put("start_seconds", Math.round(startSeconds * 100) / 100.0);
        d.put("conf_dir", options.dir.toString());
        d.put("fs_default", fsDefault());
        // the active NameNode's addresses (nn0's, which starts active); with --ha every one's under "namenodes"
        d.put("namenode_rpc", nameNodeRpc(0));
        d.put("namenode_http", nameNodeHttp(0));
        d.put("webhdfs", options.ha ? "webhdfs://" + LabOptions.NAMESERVICE : "webhdfs://" + nameNodeHttp(0));
        if (options.ha) {
            d.put("nameservice", LabOptions.NAMESERVICE);
            List<Object> nameNodes = new ArrayList<>();
            for (int i = 0; i < nameNodeCount(); i++) {
                Map<String, Object> nn = new LinkedHashMap<>();
                nn.put("id", "nn" + i);
                nn.put("rpc", nameNodeRpc(i));
                nn.put("http", nameNodeHttp(i));
                nameNodes.add(nn);
            }
            d.put("namenodes", nameNodes);
        }
        d.put("datanodes", options.dataNodes);
        if (yarn != null) {
            d.put("rm_address", yarnAddress(YarnConfiguration.RM_ADDRESS));
            d.put("rm_web", "http://" + yarnAddress(YarnConfiguration.RM_WEBAPP_ADDRESS));
        }
        d.put("nodemanagers", options.nodeManagers);
        d.put("nodemanager_mb", LabOptions.NODE_MANAGER_MB);
        d.put("nodemanager_vcores", options.nodeManagerVcores);
        d.put("control", LOOPBACK + ":" + control.port());
        if (security != null) {
            d.put("kerberos", security.describe());
        }
        return Json.object(d);
    }

    private void writeFile(String name, String text) throws IOException {
        Path target = options.dir.resolve(name);
        Path tmp = options.dir.resolve("." + name + ".tmp");
        Files.writeString(tmp, text, StandardCharsets.UTF_8);
        Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    private synchronized void stop() {
        long began = System.nanoTime();
        say("stopping");
        if (control != null) {
            control.close();
        }
        if (yarn != null) {
            // Each NodeManager waits up to 10 s for its scheduled log deletions when it stops: stop them
            // side by side, then the ResourceManager.
            List<Thread> stoppers = new ArrayList<>();
            for (int i = 0; i < options.nodeManagers; i++) {
                NodeManager nm = yarn.getNodeManager(i);
                Thread t = new Thread(() -> quietly("stopping a NodeManager", nm::stop), "stop-nm-" + i);
                t.start();
                stoppers.add(t);
            }
            for (Thread t : stoppers) {
                try {
                    t.join();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            quietly("stopping YARN", yarn::stop);
            yarn = null;
            say(String.format("stopped YARN in %.1f s", (System.nanoTime() - began) / 1e9));
        }
        if (dfs != null) {
            quietly("stopping HDFS", dfs::shutdown);
            dfs = null;
        }
        quietly("removing lab.json", () -> Files.deleteIfExists(options.dir.resolve("lab.json")));
        say(String.format("stopped in %.1f s", (System.nanoTime() - began) / 1e9));
    }

    private interface Step {
        void run() throws Exception;
    }

    private static void quietly(String what, Step step) {
        try {
            step.run();
        } catch (Throwable e) {
            say(what + ": " + e);
        }
    }

    static void say(String message) {
        System.err.println(java.time.LocalDateTime.now() + " hadoop-lab: " + message);
        System.err.flush();
    }
}
