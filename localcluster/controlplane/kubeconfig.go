// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controlplane

import (
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes the admin's kubeconfig: the API server at server,
// trusted through caPEM, and the admin token.
func WriteKubeconfig(path, server string, caPEM []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["svcnet"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["svcnet-admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["svcnet"] = &clientcmdapi.Context{Cluster: "svcnet", AuthInfo: "svcnet-admin", Namespace: "default"}
	cfg.CurrentContext = "svcnet"
	return clientcmd.WriteToFile(*cfg, path)
}
