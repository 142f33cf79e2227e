package airflowtfos.hadooplab;

import java.io.BufferedReader;
import java.io.Closeable;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.service.Service;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.nodemanager.NodeManager;

/**
 * A line protocol on 127.0.0.1 to stop and start the lab's daemons, for fault tests.
 *
 * <p>One command per connection, one line back, starting with {@code ok} or {@code error}:
 * {@code status}, {@code stop-datanode I}, {@code start-datanode I}, {@code stop-nodemanager I},
 * {@code start-nodemanager I}, and on a lab with an HA pair {@code failover} (the active NameNode made standby,
 * the standby active). DataNodes and NodeManagers are numbered from 0 in start order and keep their number (and
 * ports) across a stop and a start.
 */
final class LabControl implements Closeable {
    private final MiniDFSCluster dfs;
    private final MiniYARNCluster yarn;
    private final int nodeManagerCount;
    private final List<Integer> dataNodeXferPorts = new ArrayList<>();
    private final Map<Integer, MiniDFSCluster.DataNodeProperties> stoppedDataNodes = new HashMap<>();
    private final Map<Integer, NodeManager> replacedNodeManagers = new HashMap<>();
    private ServerSocket server;
    private Thread acceptor;

    LabControl(MiniDFSCluster dfs, MiniYARNCluster yarn, int nodeManagerCount) {
        this.dfs = dfs;
        this.yarn = yarn;
        this.nodeManagerCount = nodeManagerCount;
    }

    void start() throws IOException {
        for (DataNode dn : dfs.getDataNodes()) {
            dataNodeXferPorts.add(dn.getXferPort());
        }
        server = new ServerSocket(0, 8, InetAddress.getByName(HadoopLab.LOOPBACK));
        acceptor = new Thread(this::serve, "hadoop-lab-control");
        acceptor.setDaemon(true);
        acceptor.start();
    }

    int port() {
        return server.getLocalPort();
    }

    private void serve() {
        while (!server.isClosed()) {
            try (Socket s = server.accept()) {
                s.setSoTimeout(10_000);
                BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
                String line = in.readLine();
                String answer;
                try {
                    answer = "ok " + handle(line == null ? "" : line.trim());
                } catch (Exception e) {
                    answer = "error " + e.getMessage();
                }
                Writer out = new OutputStreamWriter(s.getOutputStream(), StandardCharsets.UTF_8);
                out.write(answer.replace('\n', ' ') + "\n");
                out.flush();
            } catch (IOException e) {
                if (!server.isClosed()) {
                    System.err.println("hadoop-lab: control connection: " + e);
                }
            }
        }
    }

    synchronized String handle(String line) throws Exception {
        String[] words = line.split("\\s+");
        String command = words[0];
        if (command.equals("status")) {
            return status();
        }
        if (command.equals("failover") && words.length == 1) {
            return failover();
        }
        if (words.length != 2) {
            throw new IllegalArgumentException("unknown command '" + line + "': use status, stop-datanode I,"
                + " start-datanode I, stop-nodemanager I, start-nodemanager I or failover");
        }
        int index = Integer.parseInt(words[1]);
        switch (command) {
            case "stop-datanode":
                return stopDataNode(index);
            case "start-datanode":
                return startDataNode(index);
            case "stop-nodemanager":
                return stopNodeManager(index);
            case "start-nodemanager":
                return startNodeManager(index);
            default:
                throw new IllegalArgumentException("unknown command '" + command + "'");
        }
    }

    private int dataNodePosition(int index) {
        if (index < 0 || index >= dataNodeXferPorts.size()) {
            throw new IllegalArgumentException("no DataNode " + index + ": there are " + dataNodeXferPorts.size());
        }
        List<DataNode> running = dfs.getDataNodes();
        for (int i = 0; i < running.size(); i++) {
            if (running.get(i).getXferPort() == dataNodeXferPorts.get(index)) {
                return i;
            }
        }
        return -1;
    }

    private String stopDataNode(int index) {
        int position = dataNodePosition(index);
        if (position < 0) {
            return "DataNode " + index + " was already stopped";
        }
        stoppedDataNodes.put(index, dfs.stopDataNode(position));
        return "DataNode " + index + " stopped";
    }

    private String startDataNode(int index) throws IOException {
        if (dataNodePosition(index) >= 0) {
            return "DataNode " + index + " was already running";
        }
        MiniDFSCluster.DataNodeProperties properties = stoppedDataNodes.remove(index);
        if (!dfs.restartDataNode(properties, true)) {
            throw new IOException("DataNode " + index + " did not restart");
        }
        dfs.waitActive();
        return "DataNode " + index + " started";
    }

    private boolean isHa() {
        return dfs.getNumNameNodes() > 1;
    }

    private int activeNameNode() {
        for (int i = 0; i < dfs.getNumNameNodes(); i++) {
            if (dfs.getNameNode(i).isActiveState()) {
                return i;
            }
        }
        return -1;
    }

    /** Make the active NameNode standby and the other one active, as an administrator's manual failover does. */
    private String failover() throws IOException {
        if (!isHa()) {
            throw new IllegalArgumentException("this lab has one NameNode: start it with --ha for a pair to fail over");
        }
        int active = activeNameNode();
        int next = active < 0 ? 0 : 1 - active;
        long began = System.nanoTime();
        if (active >= 0) {
            dfs.transitionToStandby(active);
        }
        dfs.transitionToActive(next);
        return String.format("nn%d active, nn%d standby (%.2f s)", next, 1 - next, (System.nanoTime() - began) / 1e9);
    }

    private NodeManager nodeManager(int index) {
        if (yarn == null) {
            throw new IllegalArgumentException("this lab has no YARN (it was started with --nodemanagers 0)");
        }
        if (index < 0 || index >= nodeManagerCount) {
            throw new IllegalArgumentException("no NodeManager " + index + ": there are "
                + nodeManagerCount);
        }
        NodeManager replaced = replacedNodeManagers.get(index);
        return replaced != null ? replaced : yarn.getNodeManager(index);
    }

    private String stopNodeManager(int index) {
        NodeManager nm = nodeManager(index);
        if (nm.getServiceState() != Service.STATE.STARTED) {
            return "NodeManager " + index + " was already stopped";
        }
        nm.stop();
        return "NodeManager " + index + " stopped";
    }

    private String startNodeManager(int index) {
        NodeManager old = nodeManager(index);
        if (old.getServiceState() == Service.STATE.STARTED) {
            return "NodeManager " + index + " was already running";
        }
        // A new NodeManager on the old one's folders and port, so that the RM sees the same node come back;
        // it reaches the RM over RPC (the lab's first NodeManagers are wired to it in-process).
        Configuration conf = new YarnConfiguration(old.getConfig());
        int port = old.getNMContext().getNodeId().getPort();
        conf.set(YarnConfiguration.NM_ADDRESS, old.getNMContext().getNodeId().getHost() + ":" + port);
        Configuration rm = yarn.getResourceManager().getConfig();
        conf.set(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, HadoopLab.LOOPBACK + ":"
            + rm.getSocketAddr(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS,
                YarnConfiguration.DEFAULT_RM_RESOURCE_TRACKER_ADDRESS,
                YarnConfiguration.DEFAULT_RM_RESOURCE_TRACKER_PORT).getPort());
        NodeManager nm = new NodeManager();
        nm.init(conf);
        nm.start();
        replacedNodeManagers.put(index, nm);
        return "NodeManager " + index + " started";
    }

    private String status() {
        Map<String, Object> d = new LinkedHashMap<>();
        List<Object> dataNodes = new ArrayList<>();
        for (int i = 0; i < dataNodeXferPorts.size(); i++) {
            dataNodes.add(dataNodePosition(i) >= 0 ? "running" : "stopped");
        }
        d.put("datanodes", dataNodes);
        if (isHa()) {
            List<Object> nameNodes = new ArrayList<>();
            for (int i = 0; i < dfs.getNumNameNodes(); i++) {
                nameNodes.add(dfs.getNameNode(i).isActiveState() ? "active" : "standby");
            }
            d.put("namenodes", nameNodes);
        }
        List<Object> nodeManagers = new ArrayList<>();
        for (int i = 0; i < nodeManagerCount; i++) {
            nodeManagers.add(nodeManager(i).getServiceState() == Service.STATE.STARTED ? "running" : "stopped");
        }
        d.put("nodemanagers", nodeManagers);
        return Json.object(d);
    }

    @Override
    public synchronized void close() {
        try {
            server.close();
        } catch (IOException e) {
            System.err.println("hadoop-lab: closing the control port: " + e);
        }
        for (NodeManager nm : replacedNodeManagers.values()) {
            nm.stop();
        }
        replacedNodeManagers.clear();
    }
}
